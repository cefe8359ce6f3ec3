"""The service shell: everything that talks to the world (Kafka, the store, HTTP, files).

It may import the core (``streamanon`` without ``service``, ``cli`` and ``cluster``) and
``scheduler``; nothing in the core imports it. ``docs/architecture.md`` names every module
and the seams between them; ``tests/test_architecture.py`` enforces the rules.
"""
