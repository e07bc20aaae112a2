"""Sphere geometry (Liu, Zhu & Song, eq. 12), checked with NumPy against independent
references: the tangent projection against the matrix ``I − x xᵀ``, the geodesic flow
against the matrix exponential of the rotation generator, the retraction, and the
:class:`~pymc_sgmcmc.manifolds.sphere.SphereLayout` that splits a flat position into
its spheres and its Euclidean coordinates.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from geodesic_helpers import DIM, EUCLIDEAN, LAYOUT, ROWS, random_tangent, rotation, unit

from pymc_sgmcmc.manifolds.sphere import (
    SphereLayout,
    geodesic_flow,
    project_tangent,
    retract_to_sphere,
)

pytestmark = pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")


@pytest.mark.parametrize("shape", [(3,), (5, 3), (2, 4, 10), (6, 2)])
def test_project_tangent_is_the_orthogonal_projection_onto_the_tangent_space(shape):
    rng = np.random.default_rng(1)
    x = unit(rng.normal(size=shape))
    g, h = rng.normal(size=shape), rng.normal(size=shape)
    p = project_tangent(x, g)
    dot = np.sum  # along the last axis below
    np.testing.assert_allclose(dot(x * p, axis=-1), 0.0, atol=1e-14)  # tangent
    np.testing.assert_allclose(project_tangent(x, p), p, atol=1e-14)  # idempotent
    # g − Λg is the normal part (xᵀg) x
    np.testing.assert_allclose(g - p, x * dot(x * g, axis=-1, keepdims=True), atol=1e-14)
    # self-adjoint: hᵀ Λg = (Λh)ᵀ g, sphere by sphere
    np.testing.assert_allclose(
        dot(h * p, axis=-1), dot(project_tangent(x, h) * g, axis=-1), atol=1e-13
    )
    # linear, and the identity on the normal direction's complement, zero on the normal
    np.testing.assert_allclose(
        project_tangent(x, 2.0 * g - 3.0 * h), 2.0 * p - 3.0 * project_tangent(x, h), atol=1e-13
    )
    np.testing.assert_allclose(project_tangent(x, 7.0 * x), 0.0, atol=1e-13)
    # the same as the matrix (I − x xᵀ) g, one sphere at a time
    flat_x, flat_g = x.reshape(-1, shape[-1]), g.reshape(-1, shape[-1])
    expected = [
        (np.eye(shape[-1]) - np.outer(a, a)) @ b for a, b in zip(flat_x, flat_g, strict=True)
    ]
    np.testing.assert_allclose(p.reshape(-1, shape[-1]), expected, atol=1e-14)


def test_sphere_functions_give_the_same_numbers_with_pytensor():
    rng = np.random.default_rng(2)
    x = unit(rng.normal(size=(4, 3)))
    v = random_tangent(rng, x)
    v[1] = 0.0  # a sphere at rest: no division by zero in either backend
    g = rng.normal(size=(4, 3))
    xs, vs, gs, t = pt.dmatrix("x"), pt.dmatrix("v"), pt.dmatrix("g"), pt.dscalar("t")
    outputs = [project_tangent(xs, gs), *geodesic_flow(xs, vs, t), *retract_to_sphere(xs, vs)]
    fn = pytensor.function([xs, vs, gs, t], outputs, mode="FAST_COMPILE")
    expected = [project_tangent(x, g), *geodesic_flow(x, v, 0.3), *retract_to_sphere(x, v)]
    for out, ref in zip(fn(x, v, g, 0.3), expected, strict=True):
        assert np.all(np.isfinite(out))
        np.testing.assert_allclose(out, ref, atol=1e-15)


@pytest.mark.parametrize("d", [2, 3, 10])
@pytest.mark.parametrize("t", [0.01, 0.7, -1.3, 25.0])
def test_geodesic_flow_is_the_exact_rotation(d, t):
    rng = np.random.default_rng(d)
    x = unit(rng.normal(size=(5, d)))
    v = random_tangent(rng, x, scale=[[0.01], [0.5], [1.0], [3.0], [40.0]])
    x_t, v_t = geodesic_flow(x, v, t)
    for k in range(5):
        ref_x, ref_v = rotation(x[k], v[k], t)
        np.testing.assert_allclose(x_t[k], ref_x, atol=1e-12)
        np.testing.assert_allclose(v_t[k], ref_v, atol=1e-12 * max(1.0, np.linalg.norm(v[k])))
    np.testing.assert_allclose(np.linalg.norm(x_t, axis=-1), 1.0, atol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(v_t, axis=-1), np.linalg.norm(v, axis=-1), rtol=1e-14)
    np.testing.assert_allclose(np.sum(x_t * v_t, axis=-1), 0.0, atol=1e-12)


def test_geodesic_flow_on_the_circle_advances_the_angle_by_speed_times_time():
    angle, speed, t = 0.4, -2.5, 0.9  # negative speed: clockwise
    x = np.array([np.cos(angle), np.sin(angle)])
    v = speed * np.array([-np.sin(angle), np.cos(angle)])
    x_t, v_t = geodesic_flow(x, v, t)
    new = angle + speed * t
    np.testing.assert_allclose(x_t, [np.cos(new), np.sin(new)], atol=1e-15)
    np.testing.assert_allclose(v_t, speed * np.array([-np.sin(new), np.cos(new)]), atol=1e-14)


def test_geodesic_flow_is_a_reversible_one_parameter_group():
    rng = np.random.default_rng(3)
    x = unit(rng.normal(size=(6, 4)))
    v = random_tangent(rng, x, scale=2.0)
    s, t = 0.37, 1.9
    # flow(s) then flow(t) is flow(s + t)
    for a, b in zip(
        geodesic_flow(*geodesic_flow(x, v, s), t), geodesic_flow(x, v, s + t), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=1e-13)
    # flow(t) then flow(−t) is the identity
    for a, b in zip(geodesic_flow(*geodesic_flow(x, v, t), -t), (x, v), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-13)
    # reversibility: flow(t), flip v, flow(t), flip v is the identity
    x1, v1 = geodesic_flow(x, v, t)
    x2, v2 = geodesic_flow(x1, -v1, t)
    np.testing.assert_allclose(x2, x, atol=1e-13)
    np.testing.assert_allclose(-v2, v, atol=1e-13)


def test_geodesic_flow_at_rest_does_not_move():
    x = unit([[1.0, 2.0, 2.0], [0.0, 0.0, 1.0]])
    v = np.zeros_like(x)
    v[1] = [1e-300, 0.0, 0.0]  # a denormal-scale speed divides safely too
    x_t, v_t = geodesic_flow(x, v, 5.0)
    assert np.all(np.isfinite(x_t)) and np.all(np.isfinite(v_t))
    np.testing.assert_allclose(x_t, x, atol=1e-15)
    np.testing.assert_allclose(v_t, v, atol=1e-300)


def test_retraction_removes_drift_and_keeps_exact_points():
    rng = np.random.default_rng(4)
    x = unit(rng.normal(size=(3, 5)))
    v = random_tangent(rng, x)
    same_x, same_v = retract_to_sphere(x, v)
    np.testing.assert_allclose(same_x, x, atol=1e-15)
    np.testing.assert_allclose(same_v, v, atol=1e-15)
    fixed_x, fixed_v = retract_to_sphere(1.01 * x, v + 0.1 * x)
    np.testing.assert_allclose(np.linalg.norm(fixed_x, axis=-1), 1.0, atol=1e-15)
    np.testing.assert_allclose(np.sum(fixed_x * fixed_v, axis=-1), 0.0, atol=1e-15)


def test_layout_splits_and_joins_the_flat_vector_without_moving_a_coordinate():
    assert LAYOUT.runs == (
        (0, 1, False),
        (1, 7, True),
        (7, 8, False),
        (8, 11, True),
        (11, 13, False),
    )
    assert (LAYOUT.size, LAYOUT.d, LAYOUT.n_spheres, LAYOUT.manifold_dim) == (13, 3, 3, 10)
    np.testing.assert_array_equal(LAYOUT.sphere_rows, ROWS)
    np.testing.assert_array_equal(LAYOUT.euclidean, EUCLIDEAN)
    flat = np.arange(DIM, dtype=float)
    spheres, euclidean = LAYOUT.split(flat)
    np.testing.assert_array_equal(spheres, flat[ROWS])
    np.testing.assert_array_equal(euclidean, flat[EUCLIDEAN])
    np.testing.assert_array_equal(LAYOUT.join(spheres, euclidean), flat)
    # PyTensor gives the same numbers.
    x = pt.dvector("x")
    fn = pytensor.function([x], [*LAYOUT.split(x), LAYOUT.join(*LAYOUT.split(x))])
    for out, ref in zip(fn(flat), [flat[ROWS], flat[EUCLIDEAN], flat], strict=True):
        np.testing.assert_array_equal(out, ref)
    # One sphere is a vector; a variable alone is the whole vector; runs of a kind merge.
    one = SphereLayout.from_blocks([(2, None), (4, 4), (0, 7), (1, None), (3, None)])
    assert one.runs == ((0, 2, False), (2, 6, True), (6, 10, False)) and one.n_spheres == 1
    assert one.split(np.arange(10.0))[0].shape == (4,)
    alone = SphereLayout.from_blocks([(6, 3)])
    assert alone.split(flat[:6])[1] is None and alone.manifold_dim == 4
    with pytest.raises(ValueError, match=r"share their dimension, got \[3, 4\]"):
        SphereLayout.from_blocks([(3, 3), (4, 4)])
    with pytest.raises(ValueError, match="consecutive"):
        SphereLayout.from_indices([[0, 2, 4]], [1, 3])
    with pytest.raises(ValueError, match="cover"):
        SphereLayout.from_indices([[0, 1, 2]], [4])
