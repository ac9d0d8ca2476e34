from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from channels_app.views import healthz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz", healthz, name="healthz"),
    path("", include("channels_app.urls")),
]

handler400 = "channels_app.errors.handler400"
handler404 = "channels_app.errors.handler404"
handler500 = "channels_app.errors.handler500"
