"""The service shell: everything that talks to the world (Kafka, the store, HTTP, files).

It may import the core (``streamanon`` without ``service`` and ``cli``) and ``scheduler``;
nothing in the core imports it (``tests/test_architecture.py``; see ``ARCHITECTURE.md``).
The modules: ``config`` (the configuration), ``collector`` (Kafka -> store), ``store``,
``states``, ``lifecycle`` (:class:`~streamanon.service.lifecycle.Service`: plan, base run,
close, release, publish), ``planning`` (its plans and cost models), ``status`` (its status
snapshot), ``reports``, ``publisher``, ``web`` and ``static/``, ``telemetry``,
``health``, ``control``, ``offsets``, ``broker``, ``processes``, ``logs``, ``simulate``,
``demo``.
"""
