"""Eval cases kept in the admin, beside their agent (agents.evals.stored says what one holds)."""
from __future__ import annotations

from typing import Iterable

from django.core.exceptions import ValidationError
from django.db import models, transaction
from pydantic import ValidationError as SpecError

from agents.evals.stored import CaseSpec, problems


class StoredEvalCase(models.Model):
    """One case: its id (unique per agent), what it is for, its tags and its steps (messages and gates)."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="eval_cases")
    case_id = models.CharField("case id", max_length=100, help_text="letters, digits, '.', '_' or '-'; "
                               "`manage.py eval --case ID` runs this one")
    description = models.TextField(blank=True)
    tags = models.JSONField(default=list, blank=True, help_text='e.g. ["billing", "smoke"]')
    steps = models.JSONField(help_text='e.g. [{"message": "Where is order A100?", "expect": [{"gate": "succeeded"}, '
                                       '{"gate": "calledTool", "tool": "lookup_order"}, '
                                       '{"gate": "replyIncludes", "text": "A100"}]}]')
    updated_by = models.CharField(max_length=150, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "agents"
        ordering = ["agent", "case_id"]
        verbose_name = "eval case"
        constraints = [models.UniqueConstraint(fields=["agent", "case_id"], name="eval_case_id_per_agent")]

    def __str__(self) -> str:
        return f"{self.agent.slug}: {self.case_id}"

    @classmethod
    def replace_all(cls, agent, cases: Iterable[CaseSpec], *, by: str) -> None:
        """The agent's whole set of cases becomes `cases`, in one transaction. The agent's row is locked first,
        so two replacements at once run one after the other rather than collide on a case's name."""
        with transaction.atomic():
            type(agent).objects.select_for_update().filter(pk=agent.pk).exists()
            cls.objects.filter(agent=agent).delete()
            cls.objects.bulk_create(
                cls(agent=agent, case_id=case.id, description=case.description, tags=case.tags,
                    steps=[step.model_dump(mode="json") for step in case.steps], updated_by=by[:150])
                for case in cases)

    def spec(self) -> CaseSpec:
        """The case as the runner takes it (raises pydantic's ValidationError when it is not one)."""
        return CaseSpec.model_validate({"id": self.case_id, "description": self.description, "tags": self.tags,
                                        "steps": self.steps})

    def clean(self) -> None:
        try:
            self.spec()
        except SpecError as error:
            by_field: dict[str, list[str]] = {}
            for problem in problems(error):
                head, _, rest = problem["field"].partition(".")
                name = {"id": "case_id"}.get(head, head)
                by_field.setdefault(name if name in ("case_id", "description", "tags", "steps") else "__all__",
                                    []).append(f"{rest}: {problem['message']}" if rest else problem["message"])
            raise ValidationError(by_field) from None
