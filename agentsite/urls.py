from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from channels_app.lockout import throttled_login
from channels_app.views.agents import HealthView
from sessions.dashboard.views import dashboard

admin.site.site_header = "agentsite administration"
admin.site.site_title = "agentsite admin"
admin.site.index_title = "Agents, sessions and the team"

urlpatterns = [
    path("", RedirectView.as_view(url="/playground/", permanent=False)),
    path("admin/dashboard/", dashboard, name="admin-dashboard"),  # before the admin's catch-all
    # The admin's own login, with wrong passwords counted as at /accounts/login/.
    path("admin/login/", throttled_login(admin.site.login, "admin_login")),
    path("admin/", admin.site.urls),
    path("accounts/", include("channels_app.accounts")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz", HealthView.as_view(), name="healthz"),
    path("docs", RedirectView.as_view(url="/docs/", permanent=False)),
    path("docs/", include("channels_app.docs.urls")),
    path("", include("channels_app.playground")),
    path("", include("channels_app.urls")),
]

handler400 = "channels_app.errors.handler400"
handler404 = "channels_app.errors.handler404"
handler500 = "channels_app.errors.handler500"
