"""l3codec.torch: CHW tensors, a list for a list, NCHW with stack=True; on the CPU, and on CUDA if present."""

import numpy as np
import pytest

import l3codec
from images import make_image

torch = pytest.importorskip("torch")
l3torch = pytest.importorskip("l3codec.torch")


def _encode(image, **options):
    return l3codec.encode(image, tile_width=16, **options)


def test_a_list_gives_a_list_and_stack_gives_nchw():
    images = [make_image("smooth_noise", 20, 30, 3, np.uint8, seed) for seed in range(3)]
    datas = [_encode(i) for i in images]
    tensors = l3torch.decode(datas)  # device="cpu" by default, as torchvision.io.decode_jpeg
    assert isinstance(tensors, list) and [tuple(t.shape) for t in tensors] == [(3, 20, 30)] * 3
    batch = l3torch.decode(datas, stack=True)
    assert batch.shape == (3, 3, 20, 30) and batch.dtype == torch.uint8 and batch.device.type == "cpu"
    for tensor, stacked, image in zip(tensors, batch, images):
        np.testing.assert_array_equal(l3torch.to_numpy_hwc(tensor), image)
        assert torch.equal(tensor, stacked)
    assert l3torch.decode(datas[0], stack=True).shape == (1, 3, 20, 30)


def test_an_empty_list_gives_an_empty_list_and_cannot_stack():
    assert l3torch.decode([]) == []
    with pytest.raises(l3codec.L3Error, match="at least one item"):
        l3torch.decode([], stack=True)


def test_stacked_grayscale_batch_is_n1hw():
    images = [make_image(kind, 12, 7, 1, np.uint16, 5) for kind in ("labels", "gradient")]
    batch = l3torch.decode([_encode(i) for i in images], device="cpu", stack=True)
    assert batch.shape == (2, 1, 12, 7) and batch.dtype == torch.uint16
    for tensor, image in zip(batch, images):
        np.testing.assert_array_equal(l3torch.to_numpy_hwc(tensor), image)


def test_mixed_shapes_give_a_list_of_chw_and_refuse_to_stack():
    images = [make_image("labels", 17, 9, 1, np.uint16, 1), make_image("gradient", 5, 40, 4, np.uint8, 2)]
    datas = [_encode(images[0]), _encode(images[1], mode="fast")]
    tensors = l3torch.decode(datas, device="cpu")
    assert [tuple(t.shape) for t in tensors] == [(1, 17, 9), (4, 5, 40)]
    assert tensors[0].dtype == torch.uint16
    for tensor, image in zip(tensors, images):
        np.testing.assert_array_equal(l3torch.to_numpy_hwc(tensor), image)
    with pytest.raises(l3codec.L3Error, match="stack=True needs results of one shape and dtype"):
        l3torch.decode(datas, stack=True)


def test_uint8_tensors_are_items_like_read_file_gives():
    image = make_image("smooth_noise", 16, 24, 3, np.uint8, 3)
    data = _encode(image)
    as_tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)  # what torchvision.io.read_file returns
    np.testing.assert_array_equal(l3torch.to_numpy_hwc(l3torch.decode(as_tensor)), image)
    tensors = l3torch.decode([as_tensor, data, as_tensor[None]])
    for tensor in tensors:
        np.testing.assert_array_equal(l3torch.to_numpy_hwc(tensor), image)
    with pytest.raises(TypeError, match="batch item 1: a tensor item must hold uint8 bytes, not torch.int32"):
        l3torch.decode([as_tensor, as_tensor.to(torch.int32)])
    with pytest.raises(TypeError, match="batch item 0: .*bytes-like"):
        l3torch.decode([None])
    with pytest.raises(l3codec.L3Error, match="batch item 0: .*bytes-like"):  # as l3codec.decode(None)
        l3torch.decode([None])


def test_single_item_and_region():
    image = make_image("smooth_noise", 40, 50, 3, np.uint8, 4)
    data = _encode(image)
    assert tuple(l3torch.decode(data, device="cpu").shape) == (3, 40, 50)
    crop = l3torch.decode(data, device="cpu", regions=(5, 7, 20, 30))
    np.testing.assert_array_equal(l3torch.to_numpy_hwc(crop), image[5:25, 7:37])
    crops = l3torch.decode([data, data], device="cpu", regions=[(0, 0, 8, 8), (30, 40, 8, 8)], stack=True)
    assert crops.shape == (2, 3, 8, 8)
    np.testing.assert_array_equal(l3torch.to_numpy_hwc(crops[1]), image[30:38, 40:48])


def test_bad_input_raises_l3error():
    data = _encode(make_image("gradient", 8, 8, 1, np.uint8))
    with pytest.raises(l3codec.L3Error):
        l3torch.decode([data, data[:-2]], device="cpu")
    with pytest.raises(l3codec.L3Error, match="regions"):
        l3torch.decode([data], device="cpu", regions=[None, None])
    with pytest.raises(l3codec.L3Error, match="device"):
        l3torch.decode(data, device="meta")
    with pytest.raises(l3codec.L3Error, match="max_pixels"):
        l3torch.decode([data, data], device="cpu", max_pixels=100)


def test_corrupt_payload_is_refused_unless_verification_is_off():
    image = make_image("smooth_noise", 16, 16, 3, np.uint8, 6)
    data = bytearray(_encode(image))
    data[-5] ^= 0x10  # inside the last stream's payload
    with pytest.raises(l3codec.L3Error, match="batch item 1: .*checksum"):
        l3torch.decode([_encode(image), bytes(data)], device="cpu")
    try:
        l3torch.decode(bytes(data), device="cpu", verify=False)  # decodes, or fails on its structure
    except l3codec.L3Error as error:
        assert "checksum" not in str(error)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_says_to_use_the_cpu():
    with pytest.raises(RuntimeError, match="device='cpu'"):
        l3torch.decode(_encode(make_image("gradient", 8, 8, 1, np.uint8)), device="cuda")


def test_a_corrupt_stream_names_its_item_when_verification_is_off():
    from l3codec import format as fmt

    good = _encode(make_image("smooth_noise", 16, 16, 3, np.uint8, 6))
    bad = bytearray(good)
    bad[fmt.parse(good).payload_offset] = fmt.KIND_CODED_ANS + 1  # the first stream's kind byte: no such kind
    with pytest.raises(l3codec.L3Error, match="batch item 1: corrupt stream"):
        l3torch.decode([good, bytes(bad)], device="cpu", verify=False)


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["cupy", "numba"])
def test_cuda_decode_matches_cpu(backend):
    images = [make_image("smooth_noise", 64, 70, 3, np.uint8, s) for s in range(4)]
    datas = [_encode(i) for i in images]
    batch = l3torch.decode(datas, device="cuda", backend=backend, stack=True)
    assert batch.is_cuda and batch.shape == (4, 3, 64, 70)
    for tensor, image in zip(batch, images):
        np.testing.assert_array_equal(l3torch.to_numpy_hwc(tensor), image)
    on_device = [torch.frombuffer(bytearray(d), dtype=torch.uint8).cuda() for d in datas]
    tensors = l3torch.decode(on_device, device="cuda", backend=backend)
    for tensor, image in zip(tensors, images):
        assert tensor.is_cuda
        np.testing.assert_array_equal(l3torch.to_numpy_hwc(tensor), image)
