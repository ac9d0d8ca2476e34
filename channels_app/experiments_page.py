"""The playground's A/B page: one experiment's results, a chart per metric (each variant's mean
with its 95% interval, and its running mean over time), drawn as SVG on the server.

Who may see it is who may read `GET /<slug>/v1/abs/<name>`: anyone the agent's door admits
(its members, operators, a token scoped to it).
"""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agents.models import Agent
from channels_app.doors import AGENT, admit_page, error_page
from channels_app.replies.experiments import stopped_at
from sessions.experiments.charts import interval_chart, time_chart
from sessions.experiments.enrollment import experiments_of
from sessions.experiments.results import over_time, results


def ab_page(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    admitted = admit_page(request, AGENT, slug)
    if isinstance(admitted, HttpResponse):
        return admitted
    agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
    test = experiments_of(agent.active_deployment).get(name) if agent and agent.active_deployment else None
    if test is None:
        return error_page(request, 404, "No such experiment", f"Agent {slug!r} declares no experiment {name!r}.")
    metrics = test.metric_names()
    found = results(agent.slug, test.name, {v.id: v.label for v in test.variants.values()}, test.control, metrics)
    charts = []
    for metric in metrics:
        charts.append({
            "metric": metric,
            "digits": 6 if metric == "costUsd" else 2,  # dollars per session are often fractions of a cent
            "intervals": interval_chart([(r.id, r.label, r.metrics[metric]) for r in found]),
            "over_time": time_chart(over_time(agent.slug, test.name, metric)),
            "differences": [{"variant": r.id, **vars(r.vs_control[metric])} for r in found if r.vs_control],
        })
    return render(request, "playground/ab.html", {
        "agent": agent, "test": test, "variants": found, "charts": charts,
        "stopped_at": stopped_at(agent.pk, test.name),
    })
