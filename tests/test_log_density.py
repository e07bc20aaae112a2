"""The log density simplified before differentiation: the same values, fewer operations."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.scalar.math as psm
import pytensor.tensor as pt
import pytest
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import applys_between, graph_inputs
from pytensor.tensor.elemwise import Elemwise

from pymc_sgmcmc.gradients.log_density import simplify_log_density
from pymc_sgmcmc.sampling.model_graph import flat_logp

# Extreme linear predictors included: the softplus branches and the saturated sigmoid.
LOGITS = np.array([-800.0, -40.0, -30.0, -3.0, -0.5, 0.0, 0.7, 4.0, 30.0, 40.0, 800.0])


def bernoulli_model(observed, form):
    with pm.Model() as model:
        eta = pm.Normal("eta", 0.0, 10.0, shape=len(observed))
        if form == "logit_p":
            pm.Bernoulli("y", logit_p=eta, observed=observed)
        else:
            pm.Bernoulli("y", p=pm.math.invlogit(eta), observed=observed)
    return model, model.rvs_to_values[eta]


def compiled(model, value, logp):
    """Log density and gradient in ``value``, compiled as the samplers compile them."""
    with model:
        return pm.compile([value], [logp, pt.grad(logp, value)], random_seed=False)


def count_scalar_ops(function, scalar_type):
    """Scalar operations of ``scalar_type`` in a compiled function, inner graphs included
    (PyTensor fuses elementwise operations into composites inside other operations)."""

    def count(nodes):
        total = 0
        for node in nodes:
            op = node.op
            if isinstance(op, Elemwise):
                op = op.scalar_op
            total += isinstance(op, scalar_type)
            inner = getattr(op, "fgraph", None)
            if inner is not None:
                total += count(inner.apply_nodes)
        return total

    return count(function.maker.fgraph.apply_nodes)


@pytest.mark.parametrize("form", ["logit_p", "invlogit"])
def test_a_bernoulli_logit_density_and_gradient_keep_their_values(form):
    rng = np.random.default_rng(0)
    observed = np.tile([0, 1], len(LOGITS))
    model, value = bernoulli_model(observed, form)
    eta = np.repeat(LOGITS, 2)
    logp = model.logp()
    [simplified] = simplify_log_density([logp])
    before, after = compiled(model, value, logp), compiled(model, value, simplified)
    for point in (eta, rng.normal(0.0, 3.0, size=eta.shape)):
        (logp_before, grad_before), (logp_after, grad_after) = before(point), after(point)
        np.testing.assert_allclose(logp_after, logp_before, rtol=1e-13)
        np.testing.assert_allclose(grad_after, grad_before, rtol=1e-10, atol=1e-13)
    # one softplus and one sigmoid a row, where PyMC's graph computes two and two
    assert count_scalar_ops(before, psm.Softplus) == 2
    assert count_scalar_ops(after, psm.Softplus) == 1
    assert count_scalar_ops(after, psm.Sigmoid) == 1


def test_a_nan_logit_gives_what_pymcs_density_gives():
    model, value = bernoulli_model(np.array([0, 1]), "logit_p")
    logp = model.logp()
    [simplified] = simplify_log_density([logp])
    point = np.array([np.nan, 0.0])
    before, _ = compiled(model, value, logp)(point)
    after, _ = compiled(model, value, simplified)(point)
    assert not np.isfinite(before)
    np.testing.assert_equal(after, before)


def test_other_switches_and_comparisons_are_left_alone():
    x = pt.vector("x")
    y = pt.constant(np.array([0, 1, 1]))
    kept = [
        pt.switch(y, pt.log(pt.sigmoid(x)), pt.log(1 - pt.sigmoid(2 * x))),  # two logits
        pt.switch(y, pt.log(pt.sigmoid(x)), pt.log(2 - pt.sigmoid(x))),
        pt.ge(pt.sigmoid(x), 0.5),
        pt.le(pt.sigmoid(x), 0.0),
    ]
    for graph in kept:
        [rewritten] = simplify_log_density([graph])
        assert rewritten.owner.op == graph.owner.op
        assert any(
            isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, psm.Sigmoid)
            for node in applys_between([x], [rewritten])
        )


def test_the_samplers_density_is_simplified():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 2))
    y = (rng.random(50) < 0.5).astype(float)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        x_mb, y_mb = pm.Minibatch(x, y, batch_size=10)
        pm.Bernoulli("y", logit_p=x_mb @ beta, observed=y_mb, total_size=50)
    value = model.rvs_to_values[beta]
    flat = flat_logp(model, [value], model.initial_point())
    logs_of_sigmoids = [
        node
        for node in applys_between(list(graph_inputs([flat.logp])), [flat.logp])
        if isinstance(node.op, Elemwise)
        and isinstance(node.op.scalar_op, pytensor.scalar.Log)
        and node.inputs[0].owner is not None
        and isinstance(node.inputs[0].owner.op, Elemwise)
        and isinstance(node.inputs[0].owner.op.scalar_op, psm.Sigmoid)
    ]
    assert logs_of_sigmoids == []
    # and the value is still PyMC's on the same rows
    placeholders = flat.groups[0].batches
    rows = {placeholders[0]: pt.constant(x), placeholders[1]: pt.constant(y)}
    value_at = pytensor.function(
        [flat.position, flat.groups[0].batch_rows],
        graph_replace(flat.logp, rows, strict=False),
        on_unused_input="ignore",
    )
    point = np.array([0.3, -0.8])
    with pm.Model() as full:
        beta_full = pm.Normal("beta", 0.0, 1.0, shape=2)
        pm.Bernoulli("y", logit_p=x @ beta_full, observed=y)
    expected = full.compile_logp()({"beta": point})
    np.testing.assert_allclose(value_at(point, np.int64(50)), expected, rtol=1e-12)
