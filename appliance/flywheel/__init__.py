"""The flywheel: serve the promoted adapter, keep every trajectory, find out how it fails.

    appliance serve                               # OpenAI-compatible endpoint; each request -> trajectories
    appliance trajectories import runs.jsonl      # OpenAI chat JSONL (external agents, a served log)
    appliance trajectories triage                 # failure modes per trajectory, per adapter version
    appliance sql "SELECT * FROM failure_modes_by_adapter"

Modules: `chat` (the OpenAI chat format), `serve` (the endpoint), `trajectories`
(the JSONL line format and import), `triage` (failure modes), `cli` (the
commands). The store's tables are `trajectories` and `trajectory_triage`, its
views `trajectory_failures` and `failure_modes_by_adapter` (appliance/store/schema.py).
"""
