"""Spending in the admin: the ledger, read only, and the people's own budgets, which an operator
with the permission sets (signed with their name)."""
from __future__ import annotations

from django.contrib import admin

from sessions.admin.records import RecordAdmin
from sessions.models import PersonBudget, Spend


@admin.register(Spend)
class SpendAdmin(RecordAdmin):
    list_display = ("day", "principal_id", "agent", "model", "cost_usd", "unpriced_calls", "input_tokens",
                    "output_tokens")
    list_filter = ("day", "agent", "model")
    search_fields = ("principal_id", "model", "agent__slug")
    list_select_related = ("agent",)
    date_hierarchy = "day"


@admin.register(PersonBudget)
class PersonBudgetAdmin(admin.ModelAdmin):
    list_display = ("user", "daily_usd", "monthly_usd", "updated_by", "updated_at")
    search_fields = ("user__username",)
    raw_id_fields = ("user",)
    readonly_fields = ("updated_by", "updated_at")

    def save_model(self, request, obj: PersonBudget, form, change: bool) -> None:
        obj.updated_by = request.user.get_username()
        super().save_model(request, obj, form, change)
