"""``perfectqueue``: its commands, and the kit the three command lines share."""
