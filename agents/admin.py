"""Agents and their releases in the admin: which release is active, where each came from,
Activate and Roll back, and what changed between two releases (the diff page).

The admin admits staff only, and staff are operators; the actions also need the change
permission on releases, so staff kept to viewing can compare releases but move none.

An agent's secrets are managed here by members of the operators group (and whoever
holds the model's permissions, superusers included): a value is typed into a
password field that is never filled back, and no page shows a value or its ciphertext.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from agents.discovery.activation import ReleaseError, activate_release, rollback_target
from agents.mcp import unreachable
from agents.models import Agent, Deployment, Secret, StoredEvalCase, secret_name_problem, secret_value_problem
from agents.pricing import admin as pricing_admin  # noqa: F401  registers Model prices
from agents.releasediff import diff_releases


# sessions.principal.OPERATORS_GROUP: named again here, since agents imports nothing from sessions.
OPERATORS_GROUP = "operators"
# The playground's editor of agents made in the console (channels_app.console_pages).
NEW_AGENT_PAGE, EDITOR_PAGE = "/playground/agents/new", "/playground/{slug}/edit"


def _in_operators(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.groups.filter(name=OPERATORS_GROUP).exists())


def _diff_url(d: Deployment, other: Deployment) -> str:
    return reverse("admin:agents_deployment_diff", args=[d.pk]) + f"?with={other.version}"


class SecretInline(admin.TabularInline):
    """An agent's secrets by name on its page; they are set and unset on the secrets' own pages."""

    model = Secret
    fields = ("name", "set_by", "set_at", "expires_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        return _in_operators(request) or super().has_view_permission(request, obj)


class DeploymentInline(admin.TabularInline):
    model = Deployment
    fields = ("version", "status", "content_hash", "source", "deployed_by", "created_at", "activated_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).filter(scratch=False)  # `run --dir` copies are no releases


def _rollback(modeladmin: admin.ModelAdmin, request: HttpRequest, agents) -> None:
    for agent in agents:
        try:
            d = activate_release(rollback_target(agent))
        except ReleaseError as exc:
            modeladmin.message_user(request, exc.message, messages.ERROR)
            continue
        modeladmin.message_user(request, f"{agent.slug}: rolled back to v{d.version}.", messages.SUCCESS)


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "active_deployment", "updated_at")
    search_fields = ("slug", "name", "description")
    # The watched folder's problems are the reloading server's to write (agents.discovery.watching).
    readonly_fields = ("editor", "created_at", "updated_at", "folder_problems", "folder_problems_since", "mcp_servers")
    inlines = [SecretInline, DeploymentInline]
    actions = ["roll_back"]

    def add_view(self, request, form_url="", extra_context=None):
        """An agent is made in the console's editor (every save a release), or deployed from a folder: a bare
        row here would be an agent with no instructions and no release."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(NEW_AGENT_PAGE)

    @admin.display(description="Definition")
    def editor(self, obj: Agent) -> str:
        return format_html('<a href="{}">Edit it in the console</a> (a folder agent is converted, if data can hold it)',
                           EDITOR_PAGE.format(slug=obj.slug))

    @admin.display(description="MCP servers")
    def mcp_servers(self, obj: Agent) -> str:
        """The active release's MCP servers, each started (or listed before) by this process, with why one cannot be."""
        manifest = obj.active_deployment.manifest if obj.active_deployment else {}
        declared = [m["name"] for m in manifest.get("mcp", [])]
        if not declared:
            return "-"
        errors = unreachable(obj)
        return format_html("<ul class=\"mcp-servers\">{}</ul>", format_html_join(
            "", "<li>{}: {}</li>", ((name, format_html('<span class="errornote">{}</span>', errors[name])
                                      if name in errors else "ok") for name in declared)))

    @admin.action(description="Roll back the selected agents to the release active before", permissions=["change"])
    def roll_back(self, request, queryset) -> None:
        _rollback(self, request, queryset.select_related("active_deployment"))


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ("__str__", "is_active", "status", "short_hash", "origin", "deployed_by", "created_at",
                    "activated_at", "compare")
    list_select_related = ("agent",)
    list_filter = ("status", "agent")
    search_fields = ("agent__slug", "content_hash", "source", "deployed_by")
    readonly_fields = ("agent", "version", "is_active", "compare", "source", "source_kind", "source_ref",
                       "source_commit", "source_path", "deployed_by", "allowed_domains", "validation",
                       "snapshot_path", "content_hash", "status", "manifest", "created_at", "activated_at")
    actions = ["activate", "roll_back"]

    def has_add_permission(self, request) -> bool:
        return False  # a release is made by deploying a folder or a repository

    def get_queryset(self, request):
        return super().get_queryset(request).releases()  # scratch copies are no release to activate or compare

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # a session may still run on any release
        return actions

    @admin.display(description="active", boolean=True)
    def is_active(self, obj: Deployment) -> bool:
        return obj.agent.active_deployment_id == obj.pk

    @admin.display(description="content hash")
    def short_hash(self, obj: Deployment) -> str:
        return obj.content_hash[:12]

    @admin.display(description="source")
    def origin(self, obj: Deployment) -> str:
        return obj.origin()

    @admin.display(description="compare")
    def compare(self, obj: Deployment) -> str:
        """A link to what changed since the version before (for v1, to the version after)."""
        others = obj.agent.deployments.releases().exclude(pk=obj.pk)
        other = others.filter(version__lt=obj.version).order_by("-version").first() or others.order_by("version").first()
        if other is None:
            return "-"
        return format_html('<a class="release-diff" href="{}">diff with v{}</a>', _diff_url(obj, other), other.version)

    @admin.action(description="Activate the selected release (new sessions start on it)", permissions=["change"])
    def activate(self, request, queryset) -> None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one release to activate.", messages.ERROR)
            return
        d = queryset.select_related("agent").get()
        try:
            activate_release(d)
        except ReleaseError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        self.message_user(request, f"{d.agent.slug}: v{d.version} is active.", messages.SUCCESS)

    @admin.action(description="Roll back the agents of the selected releases to the release active before",
                  permissions=["change"])
    def roll_back(self, request, queryset) -> None:
        agents = Agent.objects.filter(pk__in=queryset.values("agent_id")).select_related("active_deployment")
        _rollback(self, request, agents)

    def get_urls(self):
        return [path("<int:pk>/diff/", self.admin_site.admin_view(self.diff_view), name="agents_deployment_diff"),
                *super().get_urls()]

    def diff_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Two releases of one agent side by side: `pk` (new) against `?with=VERSION` (old)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        new = get_object_or_404(Deployment.objects.select_related("agent"), pk=pk)
        versions = list(new.agent.deployments.releases().order_by("-version").values_list("version", flat=True))
        raw = request.GET.get("with", "")
        # By default the version before (for the first, the one after), as the list's link.
        others = [v for v in versions if v != new.version]
        wanted = int(raw) if raw.isdigit() else next((v for v in others if v < new.version), others[-1] if others else None)
        old = new.agent.deployments.releases().filter(version=wanted).first() if wanted is not None else None
        old_label, new_label = (f"v{old.version}" if old else ""), f"v{new.version}"
        sections = [{"name": s.name, "changed": s.changed, "table": s.table(old_label, new_label) if s.changed else ""}
                    for s in diff_releases(old, new)] if old else []
        return TemplateResponse(request, "admin/agents/deployment_diff.html", {
            **self.admin_site.each_context(request), "opts": self.opts, "title": f"{new.agent.slug}: what changed",
            "new": new, "old": old, "versions": others, "sections": sections,
            "changed": [s["name"] for s in sections if s["changed"]],
        })


class SecretForm(forms.ModelForm):
    """A secret's agent and name, and its value typed in a field that is never filled back."""

    value = forms.CharField(
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}), strip=False,
        required=False, help_text="Stored encrypted and never shown again. On an existing secret, leave empty to "
                                  "keep the value it has.")

    class Meta:
        model = Secret
        fields = ("agent", "name")

    def clean_name(self) -> str:
        name = self.cleaned_data.get("name", "")
        if problem := secret_name_problem(name):
            raise forms.ValidationError(problem)
        return name

    def clean_value(self) -> str:
        value = self.cleaned_data.get("value", "")
        if not value and self.instance.pk is None:
            raise forms.ValidationError("A new secret needs a value.")
        if value and (problem := secret_value_problem(value)):
            raise forms.ValidationError(problem)
        return value


class OperatorsManage(admin.ModelAdmin):
    """Members of the operators group manage these rows, as whoever holds the model's permissions does."""

    def has_view_permission(self, request, obj=None) -> bool:
        return _in_operators(request) or super().has_view_permission(request, obj)

    def has_add_permission(self, request) -> bool:
        return _in_operators(request) or super().has_add_permission(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return _in_operators(request) or super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return _in_operators(request) or super().has_delete_permission(request, obj)

    def has_module_permission(self, request) -> bool:
        return _in_operators(request) or super().has_module_permission(request)


@admin.register(Secret)
class SecretAdmin(OperatorsManage):
    """Set, see (names, who, when, expiry) and unset an agent's secrets; deleting a secret unsets it."""

    form = SecretForm
    list_display = ("name", "agent", "set_by", "set_at", "expires_at")
    list_select_related = ("agent",)
    list_filter = ("agent",)
    search_fields = ("name", "agent__slug")
    readonly_fields = ("set_by", "set_at", "expires_at")

    def get_fields(self, request, obj=None):
        return ("agent", "name", "value", *self.readonly_fields)

    def get_readonly_fields(self, request, obj=None):
        # A secret's agent and name are what code reads it by: another name is another secret.
        return ("agent", "name", *self.readonly_fields) if obj is not None else self.readonly_fields

    def save_model(self, request, obj: Secret, form: SecretForm, change: bool) -> None:
        """Through `Secret.put`, which encrypts; a change with no value typed keeps the value."""
        value = form.cleaned_data.get("value", "")
        if not value:
            return
        Secret.put(obj.agent, obj.name, value, by=request.user.get_username())
        saved = Secret.objects.get(agent=obj.agent, name=obj.name)
        obj.pk, obj.set_by, obj.set_at = saved.pk, saved.set_by, saved.set_at


@admin.register(StoredEvalCase)
class StoredEvalCaseAdmin(OperatorsManage):
    """An agent's eval cases kept here (agents.evals.stored): `manage.py eval --url … --agent SLUG` runs them.
    Each is checked on save as the runner reads it; a problem is shown on the field it is in."""

    list_display = ("case_id", "agent", "description", "updated_by", "updated_at")
    list_select_related = ("agent",)
    list_filter = ("agent",)
    search_fields = ("case_id", "description", "agent__slug")
    readonly_fields = ("updated_by", "updated_at")
    fields = ("agent", "case_id", "description", "tags", "steps", *readonly_fields)

    def save_model(self, request, obj: StoredEvalCase, form, change: bool) -> None:
        obj.updated_by = request.user.get_username()
        super().save_model(request, obj, form, change)
