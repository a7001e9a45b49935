"""The benchmark harness of pq (issue 5): ``python -m benchmarks --db sqlite,mariadb,postgres``.

Layout
------
``__main__``      the command line
``runner``        the plan: databases x scenarios x peers, runs interleaved, results aggregated
``analysis``      run-by-run ratios (pq ÷ raw limit, pq ÷ peer) and the targets of issue 5
``env``           databases (scripts/start-databases.sh), Redis, the machine description
``sizes``         task counts of a full run and of ``--quick``
``stats``         median / min / max, percentiles, stopwatches
``procs``         worker processes: start, wait, stop by PID, peak RSS from /proc, start barriers
``tables``        bench_ tables: names, bulk loading by cloning a template row, verification
``handlers``      the pq handlers the workers run (plain functions); ``flows``: the benchmark DAG
``scenarios/``    one module per pq scenario group (raw, enqueue, drain+memory, latency, poll,
                  fairness, scheduler, workflow)
``peers/``        one module per peer queue (huey, procrastinate, Celery, RQ, Celery chord)
``report``        the JSON file, the Markdown table between markers, the PNG chart

Every figure is the median of the runs with min and max; ratios are taken run by run from
measurements interleaved in the same invocation (for each run: raw limit, pq, peers).
"""
