"""XGBoost cost model over (workload, config) features, pretrained on the analytical model
(ALCOP's "Anal. + XGB") and trained on measurements.

* Objective. Default ``"reg:squarederror"``: pointwise regression on a per-workload *percentile*
  label (the share of the workload's other configs a config beats; failed runs 0, the fastest 1).
  The label is scale-free, so workloads of every size contribute comparable targets, and a
  squared error on ranks optimises the order over all pairs, which is what the tuner (and
  ``pairwise_accuracy``) asks of the model. On the stored H100 data it ranks much better than
  XGBoost's ``rank:pairwise`` (leave-one-workload-out pairwise accuracy 0.93 vs 0.82-0.86; see
  benchmarks/eval_model.py). ``"rank:pairwise"`` and ``"rank:ndcg"`` remain available: one
  ranking group per workload, labelled with normalised throughput (best time / time), with the
  analytical model's predicted efficiency as the base margin (trees learn corrections).
* ``pretrain(workloads, configs)``: one group per workload, labelled with the analytical model's
  prediction (its percentile, or its normalised throughput for the ranking objectives).
* ``update(records)``: measurements become their own groups, labelled with the measured order
  (failed runs last) and weighted ``measured_weight`` times a pseudo-labelled group, so they
  outweigh the analytical labels; measured configs are also dropped from the pseudo group of their
  workload, so a measurement overrides the prediction it contradicts. Each update continues
  boosting from the current trees (``update_rounds`` more; ``n_estimators`` when nothing is
  trained yet, e.g. a model trained only on measurements of other workloads, the transfer
  setting) on pseudo + measured groups, which works the same after ``load`` (when no pseudo data
  is in memory).
* ``predict(workload, configs)``: scores, higher = faster; only the order within a workload means
  anything.
* ``save``/``load``: XGBoost's own JSON model format plus a JSON sidecar (feature names, version,
  parameters); never pickle.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..records import KernelConfig, Workload
from .analytical import Estimate, estimate
from .data import Measurement
from .features import FEATURE_NAMES, FEATURE_VERSION, featurize
from .hardware import GPUSpec

SIDECAR_SUFFIX = ".meta.json"
OBJECTIVES = ("reg:squarederror", "rank:pairwise", "rank:ndcg")
_EFF = FEATURE_NAMES.index("pred_efficiency")
_MIN_EFF = 1e-3   # efficiency floor for the prior (invalid configs, NaN)


def xgboost_module() -> Any:
    """The xgboost package, or an ImportError saying how to get it (imported on first use only)."""
    try:
        import xgboost
    except ImportError as e:  # only the learned model needs it; the analytical model does not
        raise ImportError("the XGBoost cost model needs the 'xgboost' package: pip install xgboost "
                          "(or use alcop_triton.model.analytical, which has no extra dependency)") from e
    return xgboost


def _clean_times(times: Sequence[float]) -> np.ndarray:
    return np.array([x if x is not None and math.isfinite(x) and x > 0 else math.inf for x in times], dtype=np.float64)


def _percentile(times: Sequence[float]) -> np.ndarray:
    """Share of the other entries each entry is strictly faster than: 1 for the unique fastest, 0
    for the slowest and for failed (inf/None) entries; ties share a label. The pointwise label."""
    t = _clean_times(times)
    if len(t) < 2:
        return np.ones(len(t))
    slower = len(t) - np.searchsorted(np.sort(t), t, side="right")
    return np.where(np.isfinite(t), slower / (len(t) - 1), 0.0)


def _normalised_throughput(times: Sequence[float]) -> np.ndarray:
    """best / time per entry, 0 for failed (inf/None) entries: the per-workload ranking label."""
    t = _clean_times(times)
    best = t.min() if len(t) else math.inf
    if not math.isfinite(best):
        return np.zeros(len(t))
    return best / t


class XGBCostModel:
    """Learned ranking model over (workload, config) features for one GPU spec."""

    def __init__(self, spec: GPUSpec, *, n_estimators: int = 60, update_rounds: int = 40, max_depth: int = 8,
                 learning_rate: float = 0.2, objective: str = "reg:squarederror", measured_weight: float = 4.0,
                 prior_strength: float = 3.0, nthread: int = 2, seed: int = 0) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective={objective!r}: must be one of {OBJECTIVES}")
        self.spec = spec
        self.n_estimators, self.update_rounds = n_estimators, update_rounds
        self.measured_weight = measured_weight
        self.prior_strength = prior_strength   # ranking objectives: margin units per e-fold of predicted efficiency
        self.params: dict[str, Any] = {"objective": objective, "max_depth": max_depth, "eta": learning_rate,
                                       "nthread": nthread, "seed": seed, "tree_method": "hist",
                                       # Ranking: pairs the prior already orders confidently have tiny
                                       # hessians; with a hessian floor a measurement that contradicts
                                       # the prior could never grow a leaf. Regression: every row has
                                       # hessian 1 (x its weight), and one row per leaf overfits.
                                       "min_child_weight": 1.0 if objective.startswith("reg:") else 0.0,
                                       "lambda": 1.0}
        if objective == "rank:ndcg":
            # Labels are fractions in [0, 1]; NDCG's exponential gain wants integer relevance.
            self.params["ndcg_exp_gain"] = False
        self._booster: Any = None
        self._base_offset: float | None = None  # what a prediction without base margin adds (see predict)
        self._pseudo: dict[Workload, tuple[list[KernelConfig], np.ndarray, np.ndarray]] = {}
        self._measured: dict[Workload, dict[KernelConfig, float]] = {}
        # Features of measured configs, computed once; shared (not copied) by copy(): they depend
        # only on the spec, which copies share.
        self._measured_x: dict[tuple[Workload, KernelConfig], np.ndarray] = {}
        # Feature rows and analytical times of every (workload, config) featurized so far: a pure
        # function of them and the spec, asked again and again by a tuner's optimizer (the same
        # configs after every refit). Shared by copies, like ``_measured_x``.
        self._rows: dict[tuple[Workload, KernelConfig], tuple[np.ndarray, float]] = {}

    # -- data -----------------------------------------------------------------------------------
    def features(self, workload: Workload, configs: Sequence[KernelConfig],
                 estimates: Sequence[Estimate] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Feature rows of ``configs`` on ``workload`` and their analytical times (s).

        ``estimates`` (the analytical estimate of each config, as ``ConfigSpace.details`` holds them)
        spares running the analytical model again; rows computed from them are not memoised (a caller
        passing a whole space keeps its own matrix).
        """
        if estimates is None:
            return self._features(workload, configs)
        if not configs:
            return np.zeros((0, len(FEATURE_NAMES))), np.zeros(0)
        x = np.stack([featurize(workload, c, self.spec, e) for c, e in zip(configs, estimates, strict=True)])
        return x, np.array([e.time_s for e in estimates])

    def _features(self, workload: Workload, configs: Sequence[KernelConfig]) -> tuple[np.ndarray, np.ndarray]:
        rows = self._rows
        for c in configs:
            if (workload, c) not in rows:
                e = estimate(workload, c, self.spec)
                rows[workload, c] = (featurize(workload, c, self.spec, e), e.time_s)
        got = [rows[workload, c] for c in configs]
        return np.stack([x for x, _ in got]), np.array([t for _, t in got])

    @property
    def _ranking(self) -> bool:
        return str(self.params["objective"]).startswith("rank:")

    def _labels(self, times: Sequence[float]) -> np.ndarray:
        return _normalised_throughput(times) if self._ranking else _percentile(times)

    def _groups(self) -> tuple[np.ndarray, np.ndarray, list[int], list[float]]:
        xs, ys, sizes, weights = [], [], [], []
        for wl, (cfgs, x, pred) in self._pseudo.items():
            keep = [i for i, c in enumerate(cfgs) if c not in self._measured.get(wl, {})]
            if len(keep) >= 2:
                xs.append(x[keep]); ys.append(self._labels(pred[keep].tolist()))
                sizes.append(len(keep)); weights.append(1.0)
        for wl, meas in self._measured.items():
            if len(meas) >= 2:
                cfgs = list(meas)
                xs.append(np.stack([self._measured_x[wl, c] for c in cfgs]))
                ys.append(self._labels([meas[c] for c in cfgs]))
                sizes.append(len(cfgs)); weights.append(self.measured_weight)
        if not xs:
            raise ValueError("XGBCostModel: no ranking group with at least two configs to train on")
        return np.concatenate(xs), np.concatenate(ys), sizes, weights

    def _margin(self, x: np.ndarray) -> np.ndarray:
        """Ranking objectives: the analytical prior as a base margin, so trees learn corrections to
        it, not the ranking from scratch. Regression: none (the pretraining groups carry the prior)."""
        if not self._ranking:
            return np.zeros(len(x))
        eff = np.nan_to_num(x[:, _EFF], nan=_MIN_EFF)
        return self.prior_strength * np.log(np.clip(eff, _MIN_EFF, None))

    def _dmatrix(self, x: np.ndarray, y: np.ndarray | None = None) -> Any:
        d = xgboost_module().DMatrix(x, label=y, feature_names=FEATURE_NAMES, nthread=self.params["nthread"])
        d.set_base_margin(self._margin(x))
        return d

    def _boost(self, rounds: int, fresh: bool) -> None:
        xgb = xgboost_module()
        x, y, sizes, weights = self._groups()
        d = self._dmatrix(x, y)
        if self._ranking:
            d.set_group(sizes)
            d.set_weight(np.array(weights))  # ranking weights are per group
        else:
            d.set_weight(np.repeat(np.array(weights), sizes))  # regression weights are per row
        self._booster = xgb.train(self.params, d, num_boost_round=rounds,
                                  xgb_model=None if fresh or self._booster is None else self._booster)
        self._base_offset = None

    # -- public API ----------------------------------------------------------------------------
    def pretrain(self, workloads: Iterable[Workload], configs: Sequence[KernelConfig],
                 features: dict[Workload, tuple[np.ndarray, np.ndarray]] | None = None) -> "XGBCostModel":
        """Fit from scratch on analytical pseudo-labels of every config on every workload.

        ``features``: a workload's rows and analytical times of ``configs`` computed already (``features``).
        """
        cfgs = list(configs)
        for wl in workloads:
            x, pred = features[wl] if features is not None and wl in features else self._features(wl, cfgs)
            self._pseudo[wl] = (cfgs, x, pred)
        self._boost(self.n_estimators, fresh=True)
        return self

    def update(self, records: Iterable[Measurement]) -> "XGBCostModel":
        """Add measurements (failed runs rank last) and continue boosting on all data held."""
        for r in records:
            self._measured.setdefault(r.workload, {})[r.config] = r.time_s if r.ok and r.time_s is not None else math.inf
            if (r.workload, r.config) not in self._measured_x:
                # A record of the other MMA path (e.g. DISABLE_MMA_V3=1) is featurized as it ran.
                spec = self.spec if r.mma in (None, self.spec.mma) else self.spec.with_mma(r.mma)
                self._measured_x[r.workload, r.config] = featurize(r.workload, r.config, spec)
        self._boost(self.update_rounds if self._booster is not None else self.n_estimators, fresh=False)
        return self

    def predict(self, workload: Workload, configs: Sequence[KernelConfig]) -> np.ndarray:
        """Scores of ``configs`` on ``workload``: higher means predicted faster."""
        if self._booster is None:
            raise RuntimeError("XGBCostModel.predict: call pretrain() or update() (or load()) first")
        if not configs:
            return np.zeros(0)
        return self.predict_features(self._features(workload, configs)[0])

    def predict_features(self, x: np.ndarray) -> np.ndarray:
        """``predict`` on feature rows computed already (``features``): one call scores a whole space."""
        if self._booster is None:
            raise RuntimeError("XGBCostModel.predict: call pretrain() or update() (or load()) first")
        if not len(x):
            return np.zeros(0)
        # In place, no DMatrix: building one cost ~20 ms a call, most of a tuner's model time when its
        # optimizer scores 128 configs per step; the same trees and margin.
        if self._ranking:
            return self._booster.inplace_predict(x, base_margin=self._margin(x))
        # A zero margin (what training used) costs more to pass than the prediction itself: predict
        # without it and take off the base score that XGBoost adds in its place.
        if self._base_offset is None:
            row = x[:1]
            self._base_offset = float(self._booster.inplace_predict(row)[0]
                                      - self._booster.inplace_predict(row, base_margin=np.zeros(1))[0])
        return self._booster.inplace_predict(x) - self._base_offset

    def copy(self) -> "XGBCostModel":
        """An independent model with the same trees and data (for what-if updates)."""
        other = XGBCostModel.__new__(XGBCostModel)
        other.__dict__.update(self.__dict__)
        other.params = dict(self.params)
        other._pseudo = dict(self._pseudo)
        other._measured = {wl: dict(m) for wl, m in self._measured.items()}
        other._booster = self._booster.copy() if self._booster is not None else None
        return other

    def save(self, path: str | Path) -> Path:
        """Write ``path`` (XGBoost JSON model; '.json' is added if missing) and its sidecar."""
        if self._booster is None:
            raise RuntimeError("XGBCostModel.save: nothing trained yet")
        path = Path(path)
        if path.suffix != ".json":
            path = path.with_name(path.name + ".json")
        self._booster.save_model(str(path))
        meta = {"format": "alcop_triton.xgb_cost_model", "feature_version": FEATURE_VERSION,
                "feature_names": FEATURE_NAMES, "params": self.params, "n_estimators": self.n_estimators,
                "update_rounds": self.update_rounds, "measured_weight": self.measured_weight,
                "prior_strength": self.prior_strength,
                "spec": self.spec.to_dict()}
        _sidecar(path).write_text(json.dumps(meta, indent=2, sort_keys=True))
        return path

    @classmethod
    def load(cls, path: str | Path, spec: GPUSpec | None = None) -> "XGBCostModel":
        """Read a model written by ``save``; ``spec`` defaults to the one it was trained for.

        Raises ValueError when the sidecar's features differ from this version's FEATURE_NAMES.
        """
        path = Path(path)
        meta = json.loads(_sidecar(path).read_text())
        if meta.get("format") != "alcop_triton.xgb_cost_model":
            raise ValueError(f"{_sidecar(path)}: not an alcop_triton XGBoost cost model sidecar")
        if meta["feature_version"] != FEATURE_VERSION or meta["feature_names"] != FEATURE_NAMES:
            raise ValueError(f"{path}: trained on feature version {meta['feature_version']}, this code has "
                             f"{FEATURE_VERSION}; retrain (pretrain + update) rather than reuse it")
        p = meta["params"]
        model = cls(spec if spec is not None else GPUSpec.from_dict(meta["spec"]), n_estimators=meta["n_estimators"],
                    update_rounds=meta["update_rounds"], max_depth=p["max_depth"], learning_rate=p["eta"],
                    objective=p["objective"], measured_weight=meta["measured_weight"],
                    prior_strength=meta["prior_strength"], nthread=p["nthread"],
                    seed=p["seed"])
        booster = xgboost_module().Booster()
        booster.load_model(str(path))
        model._booster = booster
        model._base_offset = None
        return model


def _sidecar(model_path: Path) -> Path:
    return model_path.with_name(model_path.name[: -len(".json")] + SIDECAR_SUFFIX)


def pairwise_accuracy(scores: Sequence[float], times: Sequence[float], tolerance: float = 0.01) -> float:
    """Share of config pairs ordered correctly (higher score = lower time).

    Pairs whose measured times differ by less than ``tolerance`` (relative) are skipped: their
    order is within measurement noise. NaN when no pair qualifies.
    """
    s = np.asarray(scores, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    i, j = np.triu_indices(len(t), k=1)
    keep = np.abs(t[i] - t[j]) > tolerance * np.minimum(t[i], t[j])
    if not keep.any():
        return float("nan")
    i, j = i[keep], j[keep]
    return float(np.mean((s[i] > s[j]) == (t[i] < t[j])))
