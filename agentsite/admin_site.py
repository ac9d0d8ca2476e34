"""The admin site, open to operators: staff, and members of the `operators` group who are not staff.

Django's admin lets in staff only; here the group's members manage agents' secrets (agents.admin)
and read the dashboard without being made staff, so the site and its login admit every operator
(`sessions.principal.is_operator`). What each of them sees is still what each model's admin permits:
a group member without model permissions finds Agents and Secrets, nothing else.
"""
from __future__ import annotations

from django.contrib.admin import AdminSite
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from sessions.principal import is_operator


class OperatorLoginForm(AdminAuthenticationForm):
    def confirm_login_allowed(self, user) -> None:
        AuthenticationForm.confirm_login_allowed(self, user)  # an inactive user is refused
        if not is_operator(user):
            raise ValidationError(self.error_messages["invalid_login"], code="invalid_login",
                                  params={"username": self.username_field.verbose_name})


class OperatorsAdminSite(AdminSite):
    login_form = OperatorLoginForm

    def has_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and is_operator(request.user))
