"""Evaluation: run a model on held-out tasks, score, summarise, decide, compare."""
from appliance.evaluate.compare import paired_bootstrap
from appliance.evaluate.decision import DecisionThresholds, Recommendation, recommend
from appliance.evaluate.metrics import ScoredSample, pass_at_k, summarize
from appliance.evaluate.runner import EvalReport, EvalSettings, run_eval

__all__ = ["DecisionThresholds", "EvalReport", "EvalSettings", "Recommendation", "ScoredSample",
           "paired_bootstrap", "pass_at_k", "recommend", "run_eval", "summarize"]
