"""An operator's price for a model id, from a date (the admin's "Model prices")."""
from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

MILLION = Decimal(1_000_000)


def _model_id(value: str) -> None:
    provider, sep, model = value.partition(":")
    if not sep or not provider or not model:
        raise ValidationError(f"{value!r} is not a model id: write it as agents name it, provider:model "
                              "(for example openai:gpt-4o or anthropic:claude-sonnet-4-5)")


class ModelPrice(models.Model):
    """Dollars per million tokens of each kind for `model`, from `effective_from` until a later row.

    It wins over the public price table, so a self-hosted model, a negotiated
    discount or a model newer than the table gets a price. A cache price left
    empty is the input price.
    """
    model = models.CharField(max_length=200, validators=[_model_id],
                             help_text="provider:model as agents name it, e.g. openai:gpt-4o")
    input_per_mtok = models.DecimalField("input $/Mtok", max_digits=12, decimal_places=6)
    output_per_mtok = models.DecimalField("output $/Mtok", max_digits=12, decimal_places=6)
    cache_read_per_mtok = models.DecimalField("cache read $/Mtok", max_digits=12, decimal_places=6,
                                              null=True, blank=True, help_text="empty: the input price")
    cache_write_per_mtok = models.DecimalField("cache write $/Mtok", max_digits=12, decimal_places=6,
                                               null=True, blank=True, help_text="empty: the input price")
    effective_from = models.DateTimeField(default=timezone.now,
                                          help_text="calls from this moment on are priced by this row")
    note = models.CharField(max_length=200, blank=True)
    updated_by = models.CharField(max_length=150, blank=True, editable=False)

    class Meta:
        app_label = "agents"
        ordering = ["model", "-effective_from"]
        constraints = [models.UniqueConstraint(fields=["model", "effective_from"], name="model_price_once_per_moment")]

    def __str__(self) -> str:
        return f"{self.model} from {self.effective_from:%Y-%m-%d %H:%M}"

    def cost(self, usage: dict[str, int]) -> Decimal:
        """Dollars for `usage` (input tokens not counting the cached ones, as agentsite counts them)."""
        cache_read = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        cache_write = self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        return (usage.get("inputTokens", 0) * self.input_per_mtok + usage.get("outputTokens", 0) * self.output_per_mtok
                + usage.get("cacheReadTokens", 0) * cache_read + usage.get("cacheWriteTokens", 0) * cache_write
                ) / MILLION
