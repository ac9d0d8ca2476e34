"""Login, logout and password change for the people of a team, with Django's own auth views.

They live under /accounts/, a prefix no agent slug can take (agents.models.RESERVED_SLUGS).
The templates are the playground's, not the admin's: the admin keeps its own login and
password pages, and these names (accounts/*.html) do not override its registration/*.html.
Both logins count wrong passwords per client address and username (channels_app.lockout).
"""
from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from channels_app.lockout import throttled_login

urlpatterns = [
    # Wrong passwords lock the client out for a while (channels_app.lockout).
    path("login/", throttled_login(auth_views.LoginView.as_view(template_name="accounts/login.html"), "login"),
         name="login"),
    # Django 5 logs out on POST only: a link or an image cannot log a person out.
    path("logout/", auth_views.LogoutView.as_view(template_name="accounts/logged_out.html"), name="logout"),
    path("password/", auth_views.PasswordChangeView.as_view(template_name="accounts/password_change.html"),
         name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(template_name="accounts/password_change_done.html"),
         name="password_change_done"),
]
