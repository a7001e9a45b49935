"""The schedules screens (perfectsched) with Starlette's TestClient on every database: the next
fire times in each schedule's zone with DST shifts marked, the latest occurrences and their
tasks, add / modify / delete and what they refuse, and no schedules section without a table."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import markupsafe
import pytest
from web_support import HOSTILE, client, csrf_of, login

NY = ZoneInfo("America/New_York")
#: 2024-03-05 00:00 New York: 02:30 on 2024-03-10 is skipped by the spring-forward gap
MARCH_5 = int(dt.datetime(2024, 3, 5, tzinfo=NY).timestamp())


def _fires(html: str, key: str) -> list[str]:
    row = re.search(rf'<tr class="schedule" data-key="{re.escape(key)}">(.*?)</tr>', html, re.S)[1]
    return re.findall(r"<li><time[^>]*>([^<]+)</time>(?: <span class=\"dst\">([^<]+)</span>)?</li>", row)


def test_the_next_ten_fire_times_in_the_schedules_zone_with_the_dst_shift_marked(sched):
    sched.add("nightly", "report", cron="30 2 * * *", timezone="America/New_York", next_time=MARCH_5)
    html = client(sched.queue, scheduler=sched).get("/schedules").text
    fires = _fires(html, "nightly")
    assert len(fires) == 10
    assert fires[0] == ("2024-03-05T02:30:00-05:00", "")
    assert fires[5] == ("2024-03-10T03:00:00-04:00", "shifted (DST gap)")  # 02:30 never shows that day
    assert fires[6] == ("2024-03-11T02:30:00-04:00", "")
    assert "America/New_York" in html and "vixie" in html


def test_a_schedule_page_shows_its_latest_occurrences_and_their_tasks(sched, clock):
    sched.add("tick", "beat", cron="@every:1h", next_time=clock.now() - 3 * 3600)
    sched.add("tick.x", "other", cron="@every:1h", next_time=clock.now() - 3600)  # not one of tick's
    sched.tick()
    mine = sorted((m.key for m in sched.queue.list(type="beat")), key=lambda k: -int(k.split(".")[1]))
    assert len(mine) == 3 and sched.queue.stats()["total"] == 4
    c = client(sched.queue, scheduler=sched)
    html = c.get("/schedule", params={"key": "tick"}).text
    assert re.findall(r'<a href="/task\?key=([^"]+)">', html) == mine
    other = c.get("/schedule", params={"key": "tick.x"}).text
    assert [k.split(".")[:2] for k in re.findall(r'<a href="/task\?key=([^"]+)">', other)] == [["tick", "x"]]
    assert c.get("/task", params={"key": mine[0]}).status_code == 200


def test_add_modify_and_delete_change_the_database(sched):
    c = client(sched.queue, scheduler=sched)
    csrf = login(c)
    form = {"key": "s1", "type": "t", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "dst": "exact", "csrf": csrf}
    r = c.post("/schedules/add", data={**form, "data": '{"n": 1}', "queue": "q9"})
    assert r.status_code == 303
    m = sched["s1"].metadata()
    assert (m.cron, m.timezone, m.dst, m.data, m.queue_name) == ("0 3 * * *", "Europe/Berlin", "exact", {"n": 1}, "q9")
    r = c.post("/schedule/modify", data={"key": "s1", "cron": "15 4 * * *", "catchup": "skip", "csrf": csrf})
    assert r.status_code == 303
    m = sched["s1"].metadata()
    assert (m.cron, m.catchup, m.timezone) == ("15 4 * * *", "skip", "Europe/Berlin")
    assert c.post("/schedule/delete", data={"key": "s1", "csrf": csrf, "confirmed": "yes"}).status_code == 303
    assert not sched["s1"].exists()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("cron", "61 * * * *", "cron"),
        ("cron", "not a cron", "cron"),
        ("timezone", "Mars/Olympus", "Mars/Olympus"),
        ("data", "[1, 2]", "data must be a JSON object"),
        ("delay", "soon", "delay must be a whole number"),
    ],
)
def test_bad_input_is_one_clear_error_and_writes_nothing(sched, field, value, message):
    sched.add("keep", "t", cron="0 1 * * *")
    c = client(sched.queue, scheduler=sched)
    csrf = login(c)
    good = {"key": "new", "type": "t", "cron": "0 3 * * *", "csrf": csrf}
    r = c.post("/schedules/add", data={**good, field: value})
    assert r.status_code == 400
    errors = re.findall(r'<p class="form-error" id="form-error" role="alert">([^<]*)</p>', r.text)
    assert len(errors) == 1 and message in errors[0], errors
    assert [m.key for m in sched.list()] == ["keep"]
    r = c.post("/schedule/modify", data={"key": "keep", field: value, "csrf": csrf})
    assert r.status_code == 400 and message in r.text
    assert sched["keep"].metadata().cron == "0 1 * * *" and sched["keep"].metadata().timezone == "UTC"


def test_a_duplicate_key_is_refused_on_the_form(sched):
    sched.add("dup", "t", cron="0 1 * * *")
    c = client(sched.queue, scheduler=sched)
    r = c.post("/schedules/add", data={"key": "dup", "type": "t2", "cron": "0 2 * * *", "csrf": login(c)})
    assert r.status_code == 400 and "already exists" in r.text
    assert sched["dup"].metadata().type == "t"


def test_schedule_actions_need_the_login_and_the_csrf_token(sched):
    sched.add("k", "t", cron="0 1 * * *")
    c = client(sched.queue, scheduler=sched)
    anonymous = csrf_of(c)
    assert c.post("/schedule/delete", data={"key": "k", "csrf": anonymous}).status_code == 401
    csrf = login(c)
    assert c.post("/schedule/delete", data={"key": "k"}).status_code == 403
    assert c.post("/schedules/add", data={"key": "n", "type": "t", "cron": "0 1 * * *"}).status_code == 403
    assert c.post("/schedule/modify", data={"key": "k", "cron": "0 2 * * *", "csrf": anonymous}).status_code == 403
    read_only = client(sched.queue, actions=False, scheduler=sched)
    assert read_only.post("/schedule/delete", data={"key": "k", "csrf": csrf}).status_code == 403
    assert "action-add" not in read_only.get("/schedules").text
    assert sched["k"].exists() and sched["k"].metadata().cron == "0 1 * * *"


def test_without_a_schedule_table_the_section_says_so(queue, sched, db_url):
    for c in (client(queue), client(queue, scheduler=None)):
        r = c.get("/schedules")
        assert r.status_code == 200 and 'id="no-schedules"' in r.text
        assert 'id="no-schedules"' in c.get("/live/schedules-due").text
    sched.store.t.drop(sched.db.engine)  # configured, but the table is gone (or never made)
    import perfectsched

    fresh = perfectsched.open(db_url, sched.table + "_none", sched.queue.table)
    try:
        r = client(queue, scheduler=fresh).get("/schedules")
        assert r.status_code == 200 and 'id="no-schedules"' in r.text
    finally:
        fresh.close()


def test_the_overview_lists_the_schedules_due_next(sched, clock):
    sched.add("later", "t", cron="0 12 * * *", next_time=clock.now() + 86400 * 2)
    sched.add("soon", "t", cron="*/30 * * * *", timezone="Europe/Berlin")
    html = client(sched.queue, scheduler=sched).get("/live/schedules-due").text
    keys = re.findall(r'<a href="/schedule\?key=([^"]+)">', html)
    assert keys == ["soon"] * 5


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_schedule_fields_are_shown_escaped(sched, hostile):
    sched.add(hostile[:60], hostile[:60], cron="0 1 * * *", data={"v": hostile}, queue="q1")
    c = client(sched.queue, scheduler=sched)
    login(c)
    pages = [c.get("/schedules").text, c.get("/schedule", params={"key": hostile[:60]}).text]
    pages.append(c.get("/live/schedules-due").text)
    for html in pages:
        assert hostile[:60] not in html and "<script>alert" not in html
    assert str(markupsafe.escape(hostile[:60])) in pages[1]
    r = c.post("/schedules/add", data={"key": "x", "type": "t", "cron": hostile, "csrf": csrf_of(c, "/schedules")})
    assert r.status_code == 400 and hostile not in r.text
