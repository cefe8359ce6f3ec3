"""A survey's differential-privacy settings: ``[[surveys]] epsilon``, ``delta``,
``dp_mechanism``, ``dp_scope``, ``epsilon_budget`` and ``out_of_domain``, their checks, and what
follows from them (the budget the store charges, the clamping of answers into their domain).

:class:`PrivateSettings` is a part of :class:`~streamanon.service.config.SurveyConfig`, which
takes its fields in; its checks read the survey's schema and its l, t and strata from there.
Pure: settings in, settings out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streamanon.errors import StreamanonError
from streamanon.ledger import charged
from streamanon.schema import DROPPED_ROLES, FieldSpec

#: The field types whose values are levels: a survey that clamps codes a value off them as
#: missing (:attr:`PrivateSettings.clamps`).
LEVEL_TYPES = ("category", "ordinal", "bool")


class PrivateSettings(BaseModel):
    """Beyond k: a differentially private release instead (streamanon.dp), drawn at close.

    ``epsilon`` alone: epsilon-differential privacy (Laplace noise, the exponential
    mechanism). ``epsilon`` with ``delta``: zero-concentrated differential privacy calibrated
    to (epsilon, delta) (discrete Gaussian noise, far less of it for many cells); the release
    is (epsilon, delta)-differentially private. The schema declares every released column's
    bounds or levels. ``epsilon_budget`` is what the survey's releases may spend in all
    (default: epsilon, one release); the store records each spending before its noisy values
    leave the process. ``out_of_domain``: what an answer outside its declared domain becomes
    ("clamp", the default: a number at its nearest bound, a level that is not declared coded
    missing, so that no answer's value decides whether it is released: dead-lettering it
    would change n and a counter, a deterministic leak; "refuse": dead-lettered, and the
    release refused with the survey's error saying why)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    epsilon: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=1)
    dp_mechanism: Literal["insensitive", "individual_ranking"] = "insensitive"
    dp_scope: Literal["all", "quasi_identifiers"] = "all"
    epsilon_budget: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    out_of_domain: Literal["clamp", "refuse"] | None = None

    @model_validator(mode="after")
    def _differential_privacy(self) -> PrivateSettings:
        survey: Any = self  # a SurveyConfig: its schema, l, t and strata
        if self.epsilon is None:
            for name in ("epsilon_budget", "delta", "out_of_domain"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} without epsilon: it applies to a differentially "
                                     "private release only")
            return self
        if survey.l is not None or survey.t is not None or survey.strata:
            raise ValueError("epsilon with l, t or strata: a differentially private release "
                             "makes its own cells over the whole survey")
        if self.epsilon_budget is not None and self.epsilon_budget < self.epsilon:
            raise ValueError(f"epsilon_budget {self.epsilon_budget:g} is less than one "
                             f"release's epsilon {self.epsilon:g}")
        if self.epsilon_budget is not None and self.delta is not None:
            raise ValueError("epsilon_budget with delta: the store's ledger adds up epsilon "
                             "only, and a zCDP release's delta would add up unseen; a survey "
                             "with delta makes its one release")
        if self.epsilon_budget is not None and not charged(self.dp_mechanism, self.dp_scope):
            raise ValueError(
                f"epsilon_budget with dp_mechanism = {self.dp_mechanism!r} and dp_scope = "
                f"{self.dp_scope!r}: that release is not differentially private, so no "
                "epsilon bounds what its releases tell together and it is charged nothing; "
                "remove epsilon_budget, or use dp_mechanism = \"insensitive\" and dp_scope = "
                "\"all\"")
        from streamanon import dp

        try:  # the domain of every released column, from the schema alone; the budget
            dp.attributes_of(survey.schema, dp.released_columns(survey.schema, self.dp_scope))
            dp.budget_of(self.epsilon, self.delta, None)
        except StreamanonError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def private(self) -> bool:
        """The survey's release kind, decided here once: a private release (``epsilon`` set),
        drawn at close from every stored record with noise (streamanon.dp: one sort and one
        draw, no base run, no incremental stage), or else a k-anonymous microaggregated one.
        Whether it is also differentially private is :attr:`privacy_budget`'s question."""
        return self.epsilon is not None

    @property
    def privacy_budget(self) -> float | None:
        """What the survey's releases may spend in all (None: not a differentially private
        release, which spends nothing)."""
        if not self.private or not charged(self.dp_mechanism, self.dp_scope):
            return None
        return self.epsilon_budget or self.epsilon

    @property
    def clamps(self) -> bool:
        """A differentially private survey that clamps its answers into their declared domain
        (``out_of_domain = "clamp"``, its default)."""
        return self.private and (self.out_of_domain or "clamp") == "clamp"

    def release_fields(self, fields: Mapping[str, FieldSpec]) -> Mapping[str, FieldSpec]:
        """The survey's fields as its release reads them: a survey that :attr:`clamps` codes
        an answer off a category's, ordinal's or bool's levels as missing, so the domain of
        every such released field has the missing level: the field is not required there
        (from the settings alone, never the data)."""
        if not self.clamps:
            return fields
        return {name: spec.model_copy(update={"required": False})
                if spec.type in LEVEL_TYPES and spec.role not in DROPPED_ROLES else spec
                for name, spec in fields.items()}
