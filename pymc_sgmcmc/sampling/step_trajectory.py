"""A step method's compiled trajectory: compiled once, on first use, and called by name.

:class:`StepTrajectory` is the part of a step method that owns its one compiled function
(:func:`~pymc_sgmcmc.sampling.trajectory.compile_step_trajectory`) and the arguments of
its calls (:class:`~pymc_sgmcmc.sampling.trajectory.TrajectoryArguments`): it keeps the
rarely changing inputs (the kernel's parameters, the anchor, the group weights) filled
until one of them changes, and draws each call's randomness from the chain's generator.
Where the step hands out draws in blocks (:attr:`StepTrajectory.blocks`), the function is
a scan over draws and :meth:`StepTrajectory.run_block` makes several in one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pymc_sgmcmc.gradients.graphs import FlatLogp
from pymc_sgmcmc.gradients.grouped import GroupedGradient
from pymc_sgmcmc.kernels.base import Kernel, tree_flatten
from pymc_sgmcmc.sampling.corrections import Trajectory
from pymc_sgmcmc.sampling.model_graph import full_data_logp
from pymc_sgmcmc.sampling.trajectory import (
    CompiledTrajectory,
    TrajectoryArguments,
    compile_step_trajectory,
)


class StepTrajectory:
    """The compiled trajectory of one step method and the arguments of its calls.

    Parameters
    ----------
    kernel : Kernel
        The step's kernel.
    graph : FlatLogp
        The model's log density on the flat position.
    model, vars, initial_point
        The model, its sampled value variables and its initial point (a kernel with an
        energy compiles the full-data log density from them).
    n_steps : int
        Integrator steps per call.
    minibatch : {"step", "trajectory"}
        Fresh rows at every step or once per trajectory.
    grouped : GroupedGradient, optional
        Minibatches of whole groups instead.
    record_gradient : bool
        Return the last gradient evaluated (for a mass adapter that learns from it).
    gradient : str
        The gradient estimator's name.
    compile_kwargs : dict, optional
        Passed to PyTensor's compile.
    windows : list, optional
        For each ``pm.Minibatch`` call, its
        :class:`~pymc_sgmcmc.sampling.row_windows.RowWindows` (minibatches read as
        windows of a shuffled copy) or None (rows drawn as ``pm.Minibatch`` does).

    Attributes
    ----------
    blocks : bool
        Compile the trajectory as a scan over draws
        (:func:`~pymc_sgmcmc.sampling.trajectory.over_draws`), for a step that hands out
        draws in blocks. Set before the first compile; a block of one is then a draw.
    """

    def __init__(
        self,
        kernel: Kernel,
        graph: FlatLogp,
        *,
        model: Any,
        vars: list,
        initial_point: dict[str, np.ndarray],
        dim: int,
        n_steps: int,
        minibatch: str,
        grouped: GroupedGradient | None,
        record_gradient: bool,
        gradient: str,
        compile_kwargs: dict | None,
        windows: list | None = None,
    ) -> None:
        self.kernel, self.graph, self.model = kernel, graph, model
        self.windows = list(windows or [None] * len(graph.groups))
        self.vars, self.initial_point = vars, initial_point
        self.n_steps, self.minibatch, self.grouped = n_steps, minibatch, grouped
        self.record_gradient, self.gradient = record_gradient, gradient
        self.compile_kwargs = compile_kwargs
        self.dim = dim
        self.dtype = graph.position.dtype
        self.blocks = False
        self._end_names = ["position", *(f"state.{name}" for name in kernel.resamples)]
        self._function: CompiledTrajectory | None = None
        self._arguments: TrajectoryArguments | None = None
        self._filled_from: tuple = (None, None, None)  # params, anchor, groups per step

    def compiled(self, params: Any) -> CompiledTrajectory:
        """The compiled trajectory for parameters shaped as ``params`` (compiled once)."""
        if self._function is None or self._function.function is None:
            exact = None
            if self.kernel.energy is not None:
                exact = full_data_logp(self.model, self.graph, self.vars, self.initial_point)
            self._function = compile_step_trajectory(
                self.kernel, self.graph, params, model=self.model, dim=self.dim,
                n_steps=self.n_steps, minibatch=self.minibatch, grouped=self.grouped,
                record_gradient=self.record_gradient, exact_logp=exact, gradient=self.gradient,
                compile_kwargs=self.compile_kwargs, blocks=self.blocks, windows=self.windows,
            )  # fmt: skip
        if self._arguments is None:
            self._arguments = TrajectoryArguments(
                self._function,
                self.kernel,
                self.n_steps,
                self.dim,
                self.kernel.extra_normals(params),
                self.dtype,
                [
                    g if w is None else w
                    for g, w in zip(self.graph.groups, self.windows, strict=True)
                ],
            )
            self._filled_from = (None, None, None)
        return self._function

    def arguments(
        self,
        params: Any,
        position: np.ndarray,
        state_fields: Any,
        step_size: float,
        *,
        refresh: bool,
        rng: np.random.Generator,
        n_rows: list[int],
        estimator: Any,
        groups: Any,
    ) -> list[Any]:
        """One call's arguments, each in the slot of its input's name.

        ``params`` are the kernel's (the step size aside, which is ``step_size``);
        ``estimator`` (:class:`~pymc_sgmcmc.gradients.estimators.ChainEstimator`) gives
        the anchor's inputs and ``groups``
        (:class:`~pymc_sgmcmc.sampling.whole_groups.WholeGroups`, optional) the group
        weights and the whole groups drawn; the randomness comes from ``rng`` in
        :meth:`~pymc_sgmcmc.sampling.trajectory.TrajectoryArguments.draw`'s order.
        """
        self.compiled(params)
        anchor, per_step = estimator.anchor, None if groups is None else groups.groups_per_step
        old_params, old_anchor, old_per_step = self._filled_from
        if params is not old_params or anchor is not old_anchor or per_step != old_per_step:
            # Parameters, anchor and groups per step change rarely: filled once each.
            # Every array of the parameters but the step size, by compiled input name.
            constants = {f"params.{k}": v for k, v in tree_flatten(params)[1:]}
            constants |= estimator.inputs()
            if groups is not None:
                constants |= groups.inputs(self.dtype)
            self._arguments.set_constants(constants)
            self._filled_from = (params, anchor, per_step)
        arguments = self._arguments.draw(
            position, state_fields, step_size, refresh=refresh, rng=rng, n_rows=n_rows,
            groups=groups,
        )  # fmt: skip
        correction = self._function.slots.get("saga.correction")
        if correction is not None:
            # SAGA: each minibatch's correction from the chain's table, for these rows.
            rows = [arguments[k] for k in self._arguments.rows]
            arguments[correction] = estimator.correction(rows)
        return arguments

    def run(
        self,
        params: Any,
        position: np.ndarray,
        state_fields: Any,
        step_size: float,
        *,
        fresh_state: Callable[[np.ndarray], Any],
        **draw: Any,
    ) -> Trajectory:
        """One trajectory from ``position``, as the step's correction sees it.

        ``draw`` holds :meth:`arguments`' keyword arguments; ``fresh_state`` makes a new
        chain's state at a position (for a correction that restarts).
        """
        arguments = self.arguments(params, position, state_fields, step_size, **draw)
        outputs = self._function(*arguments)  # compiled by arguments(), once per step
        return self.trajectory(params, position, outputs, step_size, fresh_state)

    def run_block(self, draws: list[list[Any]]) -> list[np.ndarray]:
        """Several trajectories in one call, each from the last one's end.

        ``draws``: each draw's :meth:`arguments`, in order (the first one's position and
        state start the block). Every output has a leading axis, one entry per draw.
        """
        return self._function.block(*self._arguments.stack(draws))

    def trajectory(
        self,
        params: Any,
        position: np.ndarray,
        outputs: list[np.ndarray],
        step_size: float,
        fresh_state: Callable[[np.ndarray], Any],
    ) -> Trajectory:
        """A trajectory from ``position`` with these outputs, as the correction sees it."""
        at = self._function.index
        end = self.kernel.state_type(*[outputs[at[name]] for name in self._end_names])
        gradient = outputs[at["gradient"]] if self.record_gradient else None
        return Trajectory(
            self.kernel, params, position, end, outputs, at, gradient, step_size, self.n_steps,
            fresh_state,
        )  # fmt: skip

    def draw_rows(
        self, params: Any, rng: np.random.Generator, n_rows: list[int]
    ) -> list[np.ndarray]:
        """Rows of every minibatch of one trajectory (the indices the compiled call takes)."""
        self.compiled(params)
        return self._arguments.draw_rows(rng, n_rows)

    def __getstate__(self) -> dict:
        # The compiled function travels (to pm.sample's worker processes, which link it
        # again); the argument list is bound again to the unpickled one.
        return self.__dict__ | {"_arguments": None, "_filled_from": (None, None, None)}
