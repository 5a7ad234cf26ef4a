"""l3codec.order and l3codec.geometry: the torch-free halves of the loader (epoch order, crop boxes)."""

import numpy as np
import pytest

from l3codec import L3Error
from l3codec.geometry import CenterCrop, Full, RandomCrop, RandomResizedCrop
from l3codec.order import EpochOrder, sample_rng


@pytest.mark.parametrize("length, world, batch", [(10, 2, 3), (11, 2, 3), (7, 3, 2), (64, 4, 8), (5, 1, 2)])
def test_every_sample_at_least_once_with_equal_batch_counts(length, world, batch):
    orders = [EpochOrder(length, batch_size=batch, seed=5, rank=r, world_size=world) for r in range(world)]
    counts = {len(order.batches()) for order in orders}
    assert counts == {len(orders[0])}  # the same number of batches on every rank
    seen = np.concatenate([b for order in orders for b in order.batches()])
    assert set(seen.tolist()) == set(range(length))
    padded = -(-length // world) * world
    assert seen.size == padded  # padding repeats only the few samples needed to even the ranks
    for a in range(world):  # each rank reads only its own positions of the global order
        for b in range(a + 1, world):
            mine = set(np.concatenate(orders[a].batches()).tolist())
            theirs = set(np.concatenate(orders[b].batches()).tolist())
            assert len(mine & theirs) <= padded - length


def test_drop_last_gives_whole_equal_batches_and_no_repeats():
    orders = [EpochOrder(23, batch_size=4, seed=1, rank=r, world_size=2, drop_last=True) for r in range(2)]
    batches = [order.batches() for order in orders]
    assert [len(b) for b in batches] == [2, 2]
    assert all(len(b) == 4 for rank in batches for b in rank)
    seen = np.concatenate([b for rank in batches for b in rank])
    assert len(set(seen.tolist())) == seen.size == 16


def test_order_is_a_function_of_seed_and_epoch():
    a = EpochOrder(50, batch_size=5, seed=3)
    b = EpochOrder(50, batch_size=5, seed=3)
    first = a.global_order()
    np.testing.assert_array_equal(first, b.global_order())
    a.set_epoch(1)
    assert not np.array_equal(first, a.global_order())
    assert sorted(a.global_order().tolist()) == list(range(50))
    np.testing.assert_array_equal(EpochOrder(50, batch_size=5, shuffle=False).global_order(), np.arange(50))
    assert not np.array_equal(first, EpochOrder(50, batch_size=5, seed=4).global_order())


def test_resumed_batches_are_the_rest_of_the_epoch():
    order = EpochOrder(30, batch_size=4, seed=2, rank=1, world_size=2)
    whole = order.batches()
    rest = order.batches(start=2)
    assert len(rest) == len(whole) - 2
    for a, b in zip(whole[2:], rest):
        np.testing.assert_array_equal(a, b)
    assert order.batches(start=len(order)) == []
    with pytest.raises(L3Error, match="resume"):
        order.batches(start=len(order) + 1)


def test_bad_arguments():
    with pytest.raises(L3Error, match="rank"):
        EpochOrder(10, batch_size=2, rank=2, world_size=2)
    with pytest.raises(L3Error, match="empty"):
        EpochOrder(0, batch_size=2)
    with pytest.raises(L3Error, match="no whole batch"):
        EpochOrder(5, batch_size=4, world_size=2, drop_last=True)


def test_crop_boxes_lie_inside_the_image_and_repeat_with_the_seed():
    for height, width in [(30, 40), (8, 100), (100, 7), (1, 1)]:
        for index in range(40):
            crop = RandomResizedCrop((12, 10), scale=(0.05, 1.0), flip=0.5)(height, width, sample_rng(0, 1, index))
            y, x, h, w = crop.region
            assert 0 <= y and 0 <= x and h >= 1 and w >= 1 and y + h <= height and x + w <= width
            assert crop.size == (12, 10)
            assert crop == RandomResizedCrop((12, 10), scale=(0.05, 1.0), flip=0.5)(height, width, sample_rng(0, 1, index))
    crops = [RandomResizedCrop(8, scale=(0.2, 0.3))(200, 200, sample_rng(1, 0, i)) for i in range(200)]
    fractions = np.array([c.region[2] * c.region[3] / 200**2 for c in crops])
    assert fractions.min() >= 0.19 and fractions.max() <= 0.31  # the area is drawn from `scale`
    ratios = np.array([c.region[3] / c.region[2] for c in crops])
    assert ratios.min() >= 3 / 4 - 0.05 and ratios.max() <= 4 / 3 + 0.05


def test_random_crop_centre_crop_and_flips():
    crops = [RandomCrop((5, 6), flip=0.5)(9, 20, sample_rng(0, 0, i)) for i in range(100)]
    assert {c.region[2:] for c in crops} == {(5, 6)}
    assert {c.region[0] for c in crops} == set(range(5)) and {c.region[1] for c in crops} == set(range(15))
    assert 20 < sum(c.flip for c in crops) < 80
    assert not any(c.resized for c in crops)
    assert CenterCrop(4)(10, 9, sample_rng(0, 0, 0)).region == (3, 2, 4, 4)
    assert Full()(7, 8, sample_rng(0, 0, 0)).region == (0, 0, 7, 8)
    assert not any(Full()(7, 8, sample_rng(0, 0, i)).flip for i in range(20))
    with pytest.raises(L3Error, match="larger"):
        RandomCrop(10)(9, 20, sample_rng(0, 0, 0))
    with pytest.raises(L3Error, match="larger"):
        CenterCrop((5, 30))(9, 20, sample_rng(0, 0, 0))


@pytest.mark.parametrize("make, message", [
    (lambda: RandomResizedCrop(512, scale=(2, 1)), "scale"),
    (lambda: RandomResizedCrop(512, scale=(0.5, 0.1)), "scale"),
    (lambda: RandomResizedCrop(512, scale=(0, 1)), "scale"),
    (lambda: RandomResizedCrop(512, ratio=(4 / 3, 3 / 4)), "ratio"),
    (lambda: RandomResizedCrop(0), "crop size"),
    (lambda: RandomCrop(16, flip=1.5), "flip"),
    (lambda: CenterCrop((16, -1)), "crop size"),
    (lambda: Full(flip=-0.1), "flip"),
])
def test_crops_with_impossible_arguments_are_refused_when_made(make, message):
    with pytest.raises(L3Error, match=message):
        make()
