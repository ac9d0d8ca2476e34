"""Model prices in the admin: operators price a model the public table does not (or not at
their rate), from a date on; who saved each row is kept on it."""
from __future__ import annotations

from django.contrib import admin

from agents.pricing.model import ModelPrice


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = ("model", "input_per_mtok", "output_per_mtok", "cache_read_per_mtok", "cache_write_per_mtok",
                    "effective_from", "updated_by", "note")
    list_filter = ("model",)
    search_fields = ("model", "note")
    readonly_fields = ("updated_by",)

    def save_model(self, request, obj: ModelPrice, form, change: bool) -> None:
        obj.updated_by = request.user.get_username()
        super().save_model(request, obj, form, change)
