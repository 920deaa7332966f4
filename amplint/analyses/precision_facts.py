"""The precision facts of one file, found in one pass over its calls, bindings and loops
(`PrecisionFinder`): the casts of modules (`module_casts`), the optimizers and what they train
(`optimizers`), the in-place averages of cast modules and the parameters assigned anew
(`averages`). And `FoundPrecision`, what the queries of the family read: the facts, the
module paths they were found with, and what may run after a call (`Successors`).
`precision.Precision`, the family, is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import libcst as cst

from amplint.analyses import parameter_casts
from amplint.analyses.averages import InPlaceAverage, in_place_averages, reassigned
from amplint.analyses.module_casts import CallCasts, ModuleCast, casts_at, copies
from amplint.analyses.module_paths import ModulePath, ModulePaths
from amplint.analyses.optimizers import OptimizerBuild, optimizer_built
from amplint.semantic import Analysis, ModuleIndex, Resolver, SemanticModel, Successors


@dataclass
class PrecisionFacts:
    casts: List[ModuleCast] = field(default_factory=list)
    optimizers: List[OptimizerBuild] = field(default_factory=list)
    averages: List[InPlaceAverage] = field(default_factory=list)
    # Loops that assign each parameter of a module anew (`for p in ema.parameters(): p.data =
    # p.data.float()`): the loop and the module; its parameters may have any dtype after it.
    reassigned: List[Tuple[cst.For, ModulePath]] = field(default_factory=list)


class PrecisionFinder(ModulePaths):
    """The module paths of a file's names, and the precision facts found with them (`facts`):
    each call's casts and optimizer in the file's order of calls, then the copies of cast
    modules, the averages and the reassigned parameters (none without a cast)."""

    def __init__(self, index: ModuleIndex, resolver: Resolver, call_casts: Optional[CallCasts] = None) -> None:
        super().__init__(index, resolver)
        self.facts = PrecisionFacts()
        for record in index.calls:
            self.facts.casts += casts_at(self, record, call_casts)
            optimizer = optimizer_built(self, record)
            if optimizer is not None:
                self.facts.optimizers.append(optimizer)
        if self.facts.casts:
            self.facts.casts += copies(self, list(self.facts.casts))
            self.facts.averages += in_place_averages(self, self.facts.casts)
            self.facts.reassigned += reassigned(self)


class FoundPrecision(Analysis):
    """A file's precision facts as the queries read them (`low_precision`, `adapters`,
    `loss_feeds`): `finder` (module paths and the facts), `successors` (what may run after a
    call) and the model."""

    # The family's facts in a module's summary (`amplint.project.summary.ExportsFacts`); a call
    # of another module's function reads that module's (`parameter_casts.call_casts`).
    SUMMARY_KEY = "precision"

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        call_casts = (lambda record: parameter_casts.call_casts(model, record, self.SUMMARY_KEY)) if model.external is not None else None
        self.finder = PrecisionFinder(model.index, model.resolver, call_casts)
        self.successors = Successors(model.index, model.classifier)

    @property
    def found(self) -> PrecisionFacts:
        return self.finder.facts

    @property
    def casts(self) -> List[ModuleCast]:
        return self.found.casts

    @property
    def optimizers(self) -> List[OptimizerBuild]:
        return self.found.optimizers

    @property
    def averages(self) -> List[InPlaceAverage]:
        return self.found.averages
