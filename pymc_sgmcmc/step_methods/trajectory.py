"""Fuse the ``L`` steps of one iteration into a single compiled PyTensor function.

A Python loop over compiled single-step calls pays the call overhead at every leapfrog
step; here the update rule of a sampler (a pure function from ``dynamics``) is the body
of a ``pytensor.scan`` over the per-step random inputs, so one MCMC iteration is one call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytensor
import pytensor.tensor as pt
from pymc.pytensorf import compile as pm_compile
from pytensor.graph.basic import Variable
from pytensor.graph.replace import clone_replace

from pymc_sgmcmc.step_methods.model_graph import FlatLogp

IntegratorStep = Callable[..., tuple]
"""``(state, grad_logp, noise, **params) -> new_state``, all symbolic."""


@dataclass
class TrajectoryInputs:
    """Symbolic inputs of the compiled trajectory, in call order."""

    state: list[pt.TensorVariable]
    params: dict[str, pt.TensorVariable]
    noise: pt.TensorVariable
    indices: list[pt.TensorVariable]

    def as_list(self) -> list[pt.TensorVariable]:
        """All inputs in the order the compiled function takes them."""
        return [*self.state, *self.params.values(), self.noise, *self.indices]


def build_trajectory(
    flat: FlatLogp,
    auxiliary: Sequence[pt.TensorVariable],
    params: dict[str, pt.TensorVariable],
    integrator_step: IntegratorStep,
    *,
    minibatch_per_step: bool = True,
    prepare: Callable | None = None,
    record_gradient: bool = False,
) -> tuple[TrajectoryInputs, list[Variable]]:
    """Build the symbolic trajectory of ``noise.shape[0]`` integrator steps.

    Parameters
    ----------
    flat : FlatLogp
        The model log density in the flat position.
    auxiliary : sequence of TensorVariable
        Symbolic initial values of the sampler's other state (momentum, thermostat).
    params : dict
        Symbolic scalar or array parameters, passed to ``integrator_step`` by keyword.
    integrator_step : callable
        ``(state_tuple, grad_logp, noise_t, **params) -> new_state`` where
        ``state_tuple = (position, *auxiliary)``; a single tensor when there is no
        auxiliary state.
    minibatch_per_step : bool
        Index inputs are ``(n_steps, batch_size)`` (fresh rows at every step; one more
        leading row, for the starting point, with ``prepare``) when True,
        ``(batch_size,)`` (one minibatch for the trajectory) when False.
    prepare : callable, optional
        ``(position, auxiliary, grad_logp) -> initial auxiliary of the loop``, for an
        integrator that carries more state than its inputs, e.g. leapfrog's gradient at
        the starting position (``grad_logp`` uses the first step's minibatch).
    record_gradient : bool
        Also return the last gradient the final step evaluated. For an integrator that
        moves the position first and then evaluates the gradient there (SGHMC, SGNHT),
        that is the gradient at the final position, on the last minibatch, at no cost.

    Returns
    -------
    inputs, outputs
        ``outputs`` are the final state (position first), the log density at the
        final position on the last step's minibatch, and with ``record_gradient`` that
        gradient, then the starting values of the state that ``prepare`` added.
    """
    position = flat.position
    noise = pt.matrix("noise", dtype=position.dtype)
    index_ndim = 2 if minibatch_per_step else 1
    indices = [
        pt.tensor(f"indices_{k}", shape=(None,) * index_ndim, dtype="int64")
        for k in range(len(flat.groups))
    ]
    # One gather for the whole trajectory, outside the loop: random rows of a large array
    # are memory-bound, and a gather per step inside the loop costs more than the math.
    placeholders = [b for g in flat.groups for b in g.batches]
    batches = [x for g, i in zip(flat.groups, indices, strict=True) for x in g.gathered(i)]
    grad = pt.grad(flat.logp, position)

    def grad_on(batch):
        def grad_logp(new_position):
            replace = {position: new_position, **dict(zip(placeholders, batch, strict=True))}
            return clone_replace(grad, replace)

        return grad_logp

    carried = list(auxiliary)
    if prepare is not None:
        if minibatch_per_step:
            # The starting point gets rows of its own (index row 0): sharing the first
            # step's rows between its two ends would make the trajectory irreversible, and
            # a Metropolis test would no longer correct it.
            first_batch = [b[0] for b in batches]
            batches = [b[1:] for b in batches]
        else:
            first_batch = batches
        carried = list(prepare(position, carried, grad_on(first_batch)))
    initial = [position, *carried]
    n_state, n_batch = len(initial), len(batches)

    def body(noise_t, *args):
        if minibatch_per_step:  # scan order: sequences, then carried state
            batch_t, state = args[:n_batch], args[n_batch : n_batch + n_state]
        else:  # carried state, then non-sequences
            state, batch_t = args[:n_state], args[n_state : n_state + n_batch]
        evaluated = []

        def grad_logp(new_position):
            gradient = grad_on(batch_t)(new_position)
            evaluated.append(gradient)
            return gradient

        new_state = integrator_step(state, grad_logp, noise_t, **params)
        new_state = list(new_state) if isinstance(new_state, tuple | list) else [new_state]
        return [*new_state, evaluated[-1]] if record_gradient else new_state

    outputs = pytensor.scan(
        body,
        sequences=[noise, *batches] if minibatch_per_step else [noise],
        outputs_info=[*initial, None] if record_gradient else initial,
        non_sequences=[] if minibatch_per_step else batches,
        return_updates=False,
    )
    if not isinstance(outputs, list | tuple):
        outputs = [outputs]
    final = [out[-1] for out in outputs]
    last_gradient = final.pop() if record_gradient else None
    # The log density is not needed inside the loop; evaluating it there at every step
    # costs more than the gradient's own arithmetic on a small minibatch.
    last_batch = [b[-1] for b in batches] if minibatch_per_step else batches
    final_logp = clone_replace(
        flat.logp, {position: final[0], **dict(zip(placeholders, last_batch, strict=True))}
    )
    final.append(final_logp)
    if record_gradient:
        final.append(last_gradient)
    # What ``prepare`` added to the loop state, at the starting point (e.g. leapfrog's
    # first gradient), for a sampler that may stay there.
    final.extend(carried[len(auxiliary) :])
    inputs = TrajectoryInputs(
        state=[position, *auxiliary], params=dict(params), noise=noise, indices=indices
    )
    return inputs, final


def compile_trajectory(
    inputs: TrajectoryInputs, outputs: list[Variable], compile_kwargs: dict | None = None
) -> pytensor.compile.function.types.Function:
    """Compile the trajectory; inputs are trusted (the step method builds them).

    PyMC's ``compile`` turns the parameter checks of the log density (``sigma > 0``)
    into ``-inf`` instead of an exception, so a step out of the support is an ordinary
    rejected or divergent trajectory, as in PyMC's own samplers.
    """
    kwargs = {"on_unused_input": "ignore"} | dict(compile_kwargs or {})
    # No random variables remain in the graph (the step method draws all randomness).
    fn = pm_compile(inputs.as_list(), outputs, random_seed=False, **kwargs)
    fn.trust_input = True
    return fn
