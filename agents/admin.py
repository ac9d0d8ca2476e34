from django.contrib import admin

from agents.models import Agent, Deployment


class DeploymentInline(admin.TabularInline):
    model = Deployment
    fields = ("version", "status", "content_hash", "source", "created_at", "activated_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "active_deployment", "updated_at")
    search_fields = ("slug", "name", "description")
    readonly_fields = ("created_at", "updated_at")
    inlines = [DeploymentInline]


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ("agent", "version", "status", "content_hash", "created_at", "activated_at")
    list_filter = ("status", "agent")
    search_fields = ("agent__slug", "content_hash", "source")
    readonly_fields = ("agent", "version", "source", "snapshot_path", "content_hash", "manifest", "created_at", "activated_at")
