"""The flywheel: serve the promoted adapter and keep every trajectory.

    appliance serve                               # OpenAI-compatible endpoint; each request -> trajectories
    appliance trajectories import runs.jsonl      # OpenAI chat JSONL (external agents, a served log)

Modules: `chat` (the OpenAI chat format), `serve` (the endpoint), `trajectories`
(the JSONL line format and import), `cli` (the commands). The store's tables are
`trajectories` and `trajectory_triage`, its views `trajectory_failures` and
`failure_modes_by_adapter` (appliance/store/schema.py).
"""
