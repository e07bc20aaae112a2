"""Sphere-valued variables of a model: where they lie in a sampler's flat position."""

from __future__ import annotations

import numpy as np
from pymc.distributions.mixture import MixtureRV

from pymc_sgmcmc.distributions.sphere import SphereUniformRV, VonMisesFisherRV
from pymc_sgmcmc.manifolds.sphere import SphereLayout
from pymc_sgmcmc.sampling.model_graph import is_sphere_valued


def _mixes_sphere_distributions(rv) -> bool:
    """Whether ``rv`` is a ``pm.Mixture`` whose components all lie on spheres."""
    if rv.owner is None or not isinstance(rv.owner.op, MixtureRV):
        return False
    _, _, *components = rv.owner.inputs  # rng, weights, components
    sphere_ops = (VonMisesFisherRV, SphereUniformRV)
    return all(c.owner is not None and isinstance(c.owner.op, sphere_ops) for c in components)


def sphere_layout(model, vars, point, sampler: str = "SGGMC") -> SphereLayout:
    """Where the flat position of ``vars`` holds spheres and where the rest.

    The flat position joins ``vars`` raveled in order (as ``pm.sample`` does); a
    sphere-valued variable of shape ``(..., d)`` contributes ``prod(...)`` spheres.

    Raises
    ------
    ValueError
        For a layout the geodesic samplers cannot move on, naming the variables and the
        fix: spheres of different dimensions in one sampler, a sphere-valued variable
        without an embedding axis of length ``d >= 2``, or a mixture of distributions on
        spheres whose value variable is not on the sphere.
    """
    blocks: list[tuple[int, int | None]] = []
    by_dim: dict[int, list[str]] = {}
    for var in vars:
        value = np.asarray(point[var.name])
        name = model.values_to_rvs[var].name
        if not is_sphere_valued(model, var):
            if _mixes_sphere_distributions(model.values_to_rvs[var]):
                raise ValueError(
                    f"{sampler}: {name!r} mixes distributions on a sphere, but its value "
                    "variable has no sphere transform, so it would move through all of "
                    f"R^{value.shape[-1]}, where its density is not normalised. Leave out "
                    "default_transform= (or pass default_transform="
                    "pmsg.distributions.sphere_transform) in pm.Mixture."
                )
            blocks.append((value.size, None))
            continue
        if value.ndim == 0 or value.shape[-1] < 2:
            raise ValueError(
                f"{sampler}: the sphere-valued variable {name!r} has shape {value.shape}, "
                "but points of a sphere S^(d-1) need a last axis of length d >= 2 (the "
                "embedding dimension). Give it shape (..., d) with d >= 2, or remove the "
                "sphere transform from a variable that is not a direction."
            )
        by_dim.setdefault(value.shape[-1], []).append(name)
        blocks.append((value.size, value.shape[-1]))
    if len(by_dim) > 1:
        found = ", ".join(f"d={d} for {names}" for d, names in sorted(by_dim.items()))
        split = ", ".join(
            f"pmsg.{sampler}(vars=[{', '.join(names)}], ...)" for _, names in sorted(by_dim.items())
        )
        raise ValueError(
            f"{sampler}: all sphere-valued variables of one geodesic sampler must share "
            f"their dimension, got {sorted(by_dim)} ({found}). Give each dimension its "
            f"own sampler: step=[{split}]."
        )
    return SphereLayout.from_blocks(blocks)
