"""Float16 hazards on values autocast lowered (a fact family: `Float16Hazards`): constants
outside the dtype's range written into a lowered tensor (AMP020 where PyTorch refuses them,
AMP021 where it rounds them to infinity), epsilons and clamp bounds the dtype rounds away
(AMP022), and lowered values written in place into float32 tensors (AMP023); and, for the
project's ambient pass, the binary cross-entropy CUDA's autocast refuses (AMP013's, which
reports it in the file's own regions itself). What each is,
and where it is found, is `amplint.analyses.hazard_sites`; which values are lowered,
`amplint.analyses.lowered_values`.

Each hazard holds for the contexts (device, dtype) in which the value is lowered and the
hazard is real: a constant of -1e9 overflows float16, not bfloat16; `1 - 1e-4` is 1.0 in
both; a `.norm()` is float32 on CUDA (on its float32 list), not on CPU.

The interface, for a function of this file in a context:

    model.facts(Float16Hazards).hazards(unit, "cuda", "float16") -> [Hazard, ...]

takes the function to run under `torch.autocast("cuda", dtype=torch.float16)` (its own
autocast regions run as they say), and returns each hazard with `code` (its rule's), `node`
(the CST node to report), `message` and `help` (in the function's own names; where the
function runs, and how it is reached, is the caller's to add), and the `contexts`
(`devices`, `dtypes`) it holds for: here the one asked about. The project pass asks it for
the contexts in which other files' regions call the function.

Within the file (`in_file`, what the rules report on their own): the hazards of the code
inside each of the file's enabled autocast regions whose dtype is known, and of the file's
functions called from inside them (as `RegionOps` follows them), or that a framework runs
under its own autocast (a LightningModule's hooks under `Trainer(precision="16-mixed")`),
each with the region (and the calls on the way). Not from the convention that an
`nn.Module`'s `forward` may run under its caller's autocast: no dtype is known there.

Across files (`export`, which `amplint.project.ambient` keeps in the file's ambient facts,
not in its summary: no importer's analysis reads them): for each top-level function and method of a
top-level class (`Class.method`), the hazards it has in any of the four contexts, as plain
JSON: `{"hazards": [{"code", "row", "column", "end_row", "end_column", "message", "help",
"contexts": [["cuda", "float16"], ...]}, ...]}` (and, for one that holds in both dtypes,
`by_dtype`: {dtype: [message, help]}, the words for a region of one), rows and columns
1-based as findings have them, in source order. Positions are computed only for a module that has one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import libcst as cst

from amplint.analyses.hazard_sites import Found, HazardSites, dtype_words
from amplint.analyses.lowered_values import CONTEXTS, LoweredValues, region_contexts
from amplint.analyses.region_ops import RegionOps, region_words
from amplint.semantic import Analysis, AutocastRegion, CodeUnit, SemanticModel, source_text

__all__ = ["FileHazard", "Float16Hazards", "Hazard"]


@dataclass(frozen=True)
class Hazard:
    """A float16 hazard of a function, for the contexts it holds in."""

    code: str  # the rule's: "AMP020", "AMP021", "AMP022", "AMP023"
    node: cst.CSTNode  # where to report it
    contexts: FrozenSet[Tuple[str, str]]  # (device, dtype)
    source: cst.CSTNode  # the op autocast lowered the value with
    found: Found = field(repr=False)

    @property
    def message(self) -> str:
        """The title, in the function's names."""
        return dtype_words(self.found.message, self.dtypes)

    @property
    def help(self) -> str:
        """Why it goes wrong, and what to write instead."""
        return dtype_words(self.found.help, self.dtypes)

    @property
    def devices(self) -> FrozenSet[str]:
        return frozenset(device for device, _ in self.contexts)

    @property
    def dtypes(self) -> FrozenSet[str]:
        return frozenset(dtype for _, dtype in self.contexts)

    def holding(self, contexts: FrozenSet[Tuple[str, str]]) -> "Hazard":
        """The same hazard, holding in `contexts` too."""
        return replace(self, contexts=self.contexts | contexts)


@dataclass
class FileHazard:
    """A hazard the file's own regions reach: the first region found to reach it, and the calls
    from that region's unit down to the function it is in (empty when it is in the region)."""

    hazard: Hazard
    region: AutocastRegion
    via: Tuple[cst.Call, ...] = ()

    def where(self) -> str:
        """Where the file runs it under autocast, for a message: "It runs under
        `torch.autocast("cuda")`, through `self.attend(q, k)`."."""
        through = ", then ".join(f"`{source_text(call)}`" for call in self.via)
        return f"It runs under {region_words(self.region)}" + (f", through {through}" if through else "") + "."


class Float16Hazards(Analysis):
    """`hazards(unit, device, dtype)`, `in_file()`, and `export` for the project (see the module's docstring)."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        self.lowered = model.facts(LoweredValues)
        self.sites = HazardSites(model, self.lowered)
        self._file: Optional[List[FileHazard]] = None

    def hazards(self, unit: CodeUnit, device: str, dtype: str) -> List[Hazard]:
        """The hazards of `unit` when it runs under autocast on `device` in `dtype`, in source order."""
        return self._hazards(unit, device, dtype, ambient=True)

    def _hazards(self, unit: CodeUnit, device: str, dtype: str, ambient: bool) -> List[Hazard]:
        found: List[Hazard] = []
        for site in self.sites.sites(unit):
            hit = self.sites.check(site, unit, device, dtype, ambient)
            if hit is not None:
                found.append(Hazard(hit.code, hit.node, frozenset({(device, dtype)}), hit.lowered.source, hit))
        return found

    def in_file(self) -> List[FileHazard]:
        """The hazards the file's own enabled regions reach, each once with every context it
        holds in, in the order found: the regions' own code first, then the functions they call."""
        if self._file is not None:
            return self._file
        merged: Dict[Tuple[int, str], FileHazard] = {}
        order: List[Tuple[int, str]] = []

        def add(unit: CodeUnit, region: AutocastRegion, via: Tuple[cst.Call, ...], ambient: bool) -> None:
            found: Dict[Tuple[int, str], Hazard] = {}
            for device, dtype in sorted(region_contexts(region)):
                for hazard in self._hazards(unit, device, dtype, ambient):
                    key = (id(hazard.node), hazard.code)
                    found[key] = found[key].holding(hazard.contexts) if key in found else hazard
            for key, hazard in found.items():
                if not region.possible_devices and not any({("cuda", t), ("cpu", t)} <= hazard.contexts for t in hazard.dtypes):
                    continue  # a device the code does not show: only what holds on CUDA and on CPU alike
                if key not in merged:
                    merged[key] = FileHazard(hazard, self._region_of(hazard, unit, region), via)
                    order.append(key)
                else:
                    merged[key].hazard = merged[key].hazard.holding(hazard.contexts)

        model = self.model
        for region in model.autocast_regions:
            if region.active and not region.caller and not region.hook:
                add(region.unit, region, (), ambient=False)
        units = {id(unit): unit for unit in model.units}
        for unit_id, region in model.regions.hook_regions.items():
            if unit_id in units:
                add(units[unit_id], region, (), ambient=True)
        for unit, region, via in model.facts(RegionOps).called_in_regions():
            if not region.caller:
                add(unit, region, via, ambient=True)
        self._file = [merged[key] for key in order]
        return self._file

    def _region_of(self, hazard: Hazard, unit: CodeUnit, region: AutocastRegion) -> AutocastRegion:
        """The region a message names: the one the lowering op ran in, where the unit's own
        regions decide (one of several in the unit), else the one the unit is reached from."""
        if region.unit is unit:
            found = self.lowered.region_at(hazard.source, unit)
            if found is not None:
                return found
        return region

    @classmethod
    def export(cls, model: SemanticModel, path: str) -> Dict[str, Any]:
        """For each top-level function and method of a top-level class, its hazards in each
        context (see the module's docstring); empty when it has none."""
        family = model.facts(cls)
        module_scope = model.index.module_scope
        found: Dict[str, List[Hazard]] = {}
        for unit in model.units:
            parent = unit.scope.parent
            if unit.is_module or parent is None or not (parent is module_scope or (parent.kind == "class" and parent.parent is module_scope)):
                continue
            if not family.sites.sites(unit):
                continue
            by_node: Dict[Tuple[int, str], Hazard] = {}
            for device, dtype in CONTEXTS:
                for hazard in family.hazards(unit, device, dtype):
                    key = (id(hazard.node), hazard.code)
                    by_node[key] = by_node[key].holding(hazard.contexts) if key in by_node else hazard
            if by_node:
                found[unit.name] = list(by_node.values())
        if not found:
            return {}
        from libcst.metadata import MetadataWrapper, PositionProvider

        # Rare (a model file with a hazard): the module's positions, once.
        positions = MetadataWrapper(model.module, unsafe_skip_copy=True).resolve(PositionProvider)
        exported: Dict[str, Any] = {}
        for name in sorted(found):
            entries = []
            for hazard in found[name]:
                where = positions.get(hazard.node)
                if where is None:
                    continue
                entry = {
                    "code": hazard.code,
                    "row": where.start.line,
                    "column": where.start.column + 1,
                    "end_row": where.end.line,
                    "end_column": where.end.column + 1,
                    "message": hazard.message,
                    "help": hazard.help,
                    "contexts": sorted([device, dtype] for device, dtype in hazard.contexts),
                }
                if len(hazard.dtypes) > 1:  # the words for a region of one dtype
                    entry["by_dtype"] = {dtype: [dtype_words(hazard.found.message, {dtype}), dtype_words(hazard.found.help, {dtype})] for dtype in sorted(hazard.dtypes)}
                entries.append(entry)
            if entries:
                exported[name] = {"hazards": sorted(entries, key=lambda e: (e["row"], e["column"], e["code"]))}
        return exported
