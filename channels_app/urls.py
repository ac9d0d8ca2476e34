from django.urls import path

from channels_app import custom_channels, mcp_oauth, metrics, stream
from channels_app.views import (
    agents, artifacts, console, deployments, directory, experiments, handoff, secrets, sessions, timers, tokens, tools,
)

urlpatterns = [
    path("metrics", metrics.metrics_view, name="metrics"),
    path("v1/agents", console.AgentsView.as_view(), name="agents"),
    path("v1/agents/<slug:slug>", console.AgentUpdateView.as_view(), name="agent-update"),
    path("v1/agents/<slug:slug>/definition", console.AgentDefinitionView.as_view(), name="agent-definition"),
    path("v1/models", directory.ModelDirectoryView.as_view(), name="models"),
    path("v1/agents/<slug:slug>/deployments", deployments.DeploymentListView.as_view(), name="deployments"),
    path("v1/agents/<slug:slug>/deployments/<str:version>", deployments.DeploymentDetailView.as_view(),
         name="deployment"),
    path("v1/agents/<slug:slug>/deployments/<str:version>/activate", deployments.DeploymentActivateView.as_view(),
         name="deployment-activate"),
    path("v1/agents/<slug:slug>/secrets", secrets.SecretListView.as_view(), name="secrets"),
    path("v1/agents/<slug:slug>/secrets/<str:name>", secrets.SecretView.as_view(), name="secret"),
    path("v1/tokens", tokens.TokenListView.as_view(), name="tokens"),
    path("v1/tokens/<str:token_id>", tokens.TokenView.as_view(), name="token"),
    path("<slug:slug>/v1/session", sessions.SessionCreateView.as_view(), name="session-create"),
    path("<slug:slug>/v1/sessions", sessions.SessionListView.as_view(), name="session-list"),
    path("<slug:slug>/v1/session/<str:session_id>", sessions.SessionDetailView.as_view(), name="session-detail"),
    path("<slug:slug>/v1/session/<str:session_id>/message", sessions.SessionMessageView.as_view(), name="session-message"),
    path("<slug:slug>/v1/session/<str:session_id>/stop", sessions.SessionStopView.as_view(), name="session-stop"),
    path("<slug:slug>/v1/session/<str:session_id>/handoff", handoff.SessionHandoffView.as_view(),
         name="session-handoff"),
    path("<slug:slug>/v1/session/<str:session_id>/events", sessions.SessionEventsView.as_view(), name="session-events"),
    path("<slug:slug>/v1/session/<str:session_id>/stream", stream.stream_view, name="session-stream"),
    path("<slug:slug>/v1/session/<str:session_id>/approvals", tools.ApprovalListView.as_view(), name="approvals"),
    path("<slug:slug>/v1/session/<str:session_id>/approvals/<str:call_id>", tools.ApprovalResolveView.as_view(),
         name="approval-resolve"),
    path("<slug:slug>/v1/session/<str:session_id>/questions/<str:call_id>", tools.QuestionAnswerView.as_view(),
         name="question-answer"),
    path("<slug:slug>/v1/session/<str:session_id>/artifacts", artifacts.SessionArtifactsView.as_view(),
         name="artifacts"),
    path("<slug:slug>/v1/session/<str:session_id>/artifacts/<str:name>", artifacts.SessionArtifactView.as_view(),
         name="artifact"),
    path("<slug:slug>/v1/tools/<str:tool_name>/call", tools.ToolCallView.as_view(), name="tool-call"),
    path("<slug:slug>/v1/session/<str:session_id>/reminders", timers.SessionRemindersView.as_view(), name="reminders"),
    path("<slug:slug>/v1/reminders/<str:reminder_id>", timers.ReminderView.as_view(), name="reminder"),
    path("<slug:slug>/v1/dev/schedules/<str:schedule_id>", timers.DevScheduleFireView.as_view(), name="dev-schedule"),
    path("<slug:slug>/v1/dev/reminders", timers.DevReminderListView.as_view(), name="dev-reminders"),
    path("<slug:slug>/v1/dev/reminders/<str:reminder_id>", timers.DevReminderFireView.as_view(), name="dev-reminder"),
    path("<slug:slug>/v1/channels/<str:channel_id>", custom_channels.ChannelRouteView.as_view(), name="channel"),
    path("<slug:slug>/v1/channels/<str:channel_id>/<path:rest>", custom_channels.ChannelRouteView.as_view(),
         name="channel-route"),
    path("<slug:slug>/v1/abs", experiments.ExperimentListView.as_view(), name="abs"),
    path("<slug:slug>/v1/abs/<str:name>", experiments.ExperimentResultsView.as_view(), name="ab"),
    path("<slug:slug>/v1/info", agents.AgentInfoView.as_view(), name="agent-info"),
    path("<slug:slug>/v1/release", agents.AgentReleaseView.as_view(), name="agent-release"),
    path("<slug:slug>/v1/health", agents.AgentHealthView.as_view(), name="agent-health"),
]

# The playground's OAuth button and its callback (channels_app.mcp_oauth).
urlpatterns += mcp_oauth.urlpatterns
