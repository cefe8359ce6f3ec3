"""The simulation and demo wing: a survey simulated on the planner's cost models
(:mod:`.simulate`), the demo that runs the service on simulated respondents (:mod:`.demo`,
:mod:`.respondents`) and the calibration the simulation plans with (:mod:`.calibration`).

It drives the service from outside, as a user would: it imports the service and the
scheduler, and nothing of the service imports it.
"""
