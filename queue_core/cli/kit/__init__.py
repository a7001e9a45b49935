"""Plumbing shared by the three command-line tools: perfectqueue, perfectsched and pqflow.

One module a rule; import from the module that holds it:

- :mod:`.exits`: exit codes, :class:`~.exits.CLIError`, which error exits with which code
- :mod:`.group`: :class:`~.group.PQGroup` (every error as one line on stderr) and ``main_wrapper``
- :mod:`.options`: ``-D/--table/-c/-e/-v`` of every command (:func:`~.options.common_options`)
- :mod:`.settings`: the configuration merged from defaults, config file, environment and options
- :mod:`.passwords`: database passwords scrubbed from every message
- :mod:`.argv_password`: a ``run`` command re-executed without the password in its argv
- :mod:`.stderr_logging`: debug lines to stderr with ``-v``, library warnings kept off it
- :mod:`.parsing`: JSON objects, times and plain integers given on the command line
- :mod:`.output`: tables, JSON, times and error texts as commands print them
- :mod:`.worker_command`: the options and the body of the worker commands
"""
