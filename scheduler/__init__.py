"""Scheduling theory for streamanon: when to start the base run (paper 001, sections III-B, IV).

The planner, cost models, arrival forecasts, the live planning policy (``scheduler.live``)
and APScheduler jobs live here. This package imports nothing from the service.
"""
