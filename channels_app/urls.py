from django.urls import path

from channels_app import stream, views

urlpatterns = [
    path("v1/agents", views.AgentListView.as_view(), name="agents"),
    path("<slug:slug>/v1/session", views.SessionCreateView.as_view(), name="session-create"),
    path("<slug:slug>/v1/sessions", views.SessionListView.as_view(), name="session-list"),
    path("<slug:slug>/v1/session/<str:session_id>", views.SessionDetailView.as_view(), name="session-detail"),
    path("<slug:slug>/v1/session/<str:session_id>/message", views.SessionMessageView.as_view(), name="session-message"),
    path("<slug:slug>/v1/session/<str:session_id>/stop", views.SessionStopView.as_view(), name="session-stop"),
    path("<slug:slug>/v1/session/<str:session_id>/events", views.SessionEventsView.as_view(), name="session-events"),
    path("<slug:slug>/v1/session/<str:session_id>/stream", stream.stream_view, name="session-stream"),
    path("<slug:slug>/v1/session/<str:session_id>/approvals", views.ApprovalListView.as_view(), name="approvals"),
    path("<slug:slug>/v1/session/<str:session_id>/approvals/<str:call_id>", views.ApprovalResolveView.as_view(),
         name="approval-resolve"),
    path("<slug:slug>/v1/tools/<str:tool_name>/call", views.ToolCallView.as_view(), name="tool-call"),
    path("<slug:slug>/v1/session/<str:session_id>/reminders", views.SessionRemindersView.as_view(), name="reminders"),
    path("<slug:slug>/v1/reminders/<str:reminder_id>", views.ReminderView.as_view(), name="reminder"),
    path("<slug:slug>/v1/dev/schedules/<str:schedule_id>", views.DevScheduleFireView.as_view(), name="dev-schedule"),
    path("<slug:slug>/v1/dev/reminders", views.DevReminderListView.as_view(), name="dev-reminders"),
    path("<slug:slug>/v1/dev/reminders/<str:reminder_id>", views.DevReminderFireView.as_view(), name="dev-reminder"),
    path("<slug:slug>/v1/info", views.AgentInfoView.as_view(), name="agent-info"),
    path("<slug:slug>/v1/health", views.AgentHealthView.as_view(), name="agent-health"),
]
