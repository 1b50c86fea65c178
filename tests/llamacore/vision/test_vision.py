"""Images through llamacore: Projector (libmtmd), prompts with images, and Llama's vision chat."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from helpers import N_THREADS
from tiny_vision import IMAGE_TOKENS, image_bytes, pattern_image, write_projector

from llamacore import Batch, Context, Image, Llama, Projector
from llamacore.llama_chat_format import Llava15ChatHandler
from llamacore.vision.media import MediaError, MediaPolicy
from llamacore.vision.prompt import MEDIA_MARKER, decode_image, image_boundary, placeholder, tokenize_with_images


@pytest.fixture(scope="module")
def projector(tiny_model, projector_path):
    return Projector(tiny_model, projector_path, n_threads=N_THREADS)


@pytest.fixture(scope="module")
def llm(tiny_model_path, projector_path):
    return Llama(tiny_model_path, clip_model_path=projector_path, n_ctx=512, n_threads=N_THREADS, seed=1)


def data_uri(kind: int, fmt: str = "PNG") -> str:
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(image_bytes(pattern_image(kind), fmt)).decode()


def ask(llm: Llama, *urls: str, question: str = "What is in the picture?", **kwargs) -> dict:
    parts = [{"type": "text", "text": question}] + [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return llm.create_chat_completion([{"role": "user", "content": parts}], temperature=0, max_tokens=8, **kwargs)


def test_projector_loads_and_reports(projector, projector_path):
    assert Projector.capabilities(projector_path) == {"vision": True, "audio": False}
    assert projector.n_embd == 64 and not projector.uses_mrope


def test_projector_of_another_width_is_refused(tiny_model, tmp_path):
    path = write_projector(tmp_path / "mmproj-32.gguf", 32)
    with pytest.raises(ValueError, match="mismatch between text model"):
        Projector(tiny_model, path)


def test_a_model_file_is_not_a_projector(tiny_model, tiny_model_path):
    with pytest.raises(ValueError, match="no clip"):
        Projector(tiny_model, tiny_model_path)


def test_projector_key_of_wrong_type_is_refused_before_llama_cpp(tiny_model, tmp_path):
    """clip.cpp asserts scalar key types (an abort); the check refuses the file first."""
    import gguf

    path = tmp_path / "bad-types.gguf"
    w = gguf.GGUFWriter(path, "clip")
    w.add_string("clip.projector_type", "mlp")
    w.add_string("clip.vision.image_size", "thirty-two")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match="clip.vision.image_size must be a uint32"):
        Projector(tiny_model, path)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP"])
def test_images_decode_from_every_format(projector, fmt):
    data = image_bytes(pattern_image(0), fmt)
    image = projector.image(data)
    assert (image.width, image.height) == (32, 32)
    import hashlib
    assert image.id == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("data", [b"", b"not an image", b"RIFF\x00\x00\x00\x00WEBPVP8 "])
def test_non_images_are_refused(projector, data):
    with pytest.raises(ValueError):
        projector.image(data)


def test_broken_png_is_refused(projector):
    with pytest.raises(ValueError, match="truncated or corrupt"):
        projector.image(image_bytes(pattern_image(0))[:60])


def test_image_from_array_and_its_id():
    a = Image.from_array(pattern_image(3))
    assert a.id == Image.from_array(pattern_image(3)).id != Image.from_array(pattern_image(4)).id
    with pytest.raises(ValueError, match="shape"):
        Image.from_array(np.zeros((4, 4), np.uint8))


def test_tokenize_places_images_between_text(projector, tiny_model):
    a, b = Image.from_array(pattern_image(0)), Image.from_array(pattern_image(1))
    tokens = tokenize_with_images(projector, tiny_model, f"look {MEDIA_MARKER} and {MEDIA_MARKER} now", [a, b])
    starts = sorted(tokens.images)
    assert [tokens.images[s].id for s in starts] == [a.id, b.id]
    assert all(tokens.images[s].n_tokens == IMAGE_TOKENS for s in starts)
    assert tokens[0] == tiny_model.token_bos
    assert tokens[starts[0]:starts[0] + IMAGE_TOKENS] == [placeholder(a.id, i) for i in range(IMAGE_TOKENS)]
    assert sum(1 for t in tokens if t < 0) == 2 * IMAGE_TOKENS
    # a prefix that ends inside an image is cut back to the image's start
    assert image_boundary(tokens, starts[0] + 5) == starts[0]
    assert image_boundary(tokens, starts[0]) == starts[0]


def test_marker_count_must_match_images(projector, tiny_model):
    with pytest.raises(ValueError, match="1 image markers for 0 images"):
        tokenize_with_images(projector, tiny_model, f"typed {MEDIA_MARKER}", [])


def test_image_rows_decoded_in_pieces_equal_one_piece(tiny_model, projector):
    """decode_image splits an image into batch-sized pieces; the logits after it do not change."""
    chunk = projector.tokenize([Image.from_array(pattern_image(5))], add_special=False)[0]
    out = []
    for capacity in (IMAGE_TOKENS, 5):
        ctx = Context(tiny_model, n_ctx=128, n_batch=64, n_threads=N_THREADS)
        decode_image(ctx, Batch(capacity, embd=projector.n_embd), projector, chunk, 0, 0, logits_last=True)
        out.append(ctx.logits(-1).copy())
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-5)


def test_different_images_give_different_answers(llm):
    first = ask(llm, data_uri(0))
    assert first["usage"]["prompt_tokens"] > IMAGE_TOKENS
    assert ask(llm, data_uri(0))["choices"][0]["message"] == first["choices"][0]["message"]
    assert ask(llm, data_uri(1))["choices"][0]["message"] != first["choices"][0]["message"]


def test_follow_up_on_the_same_image_does_not_re_encode(llm):
    turn = [{"role": "user", "content": [{"type": "text", "text": "Look:"},
                                         {"type": "image_url", "image_url": {"url": data_uri(2)}}]}]
    llm.create_chat_completion(turn, temperature=0, max_tokens=4)
    encoded = llm.projector.n_encoded
    follow = turn + [{"role": "assistant", "content": "A picture."}, {"role": "user", "content": "And the colours?"}]
    llm.create_chat_completion(follow, temperature=0, max_tokens=4)
    assert llm.projector.n_encoded == encoded
    ask(llm, data_uri(3))
    assert llm.projector.n_encoded == encoded + 1


def test_cached_answer_equals_fresh_answer(llm, tiny_model_path, projector_path):
    """Reusing KV across image prompts gives exactly what a fresh model gives."""
    ask(llm, data_uri(0), question="Describe")
    warm = ask(llm, data_uri(0), question="Describe it")
    fresh = Llama(tiny_model_path, clip_model_path=projector_path, n_ctx=512, n_threads=N_THREADS)
    assert ask(fresh, data_uri(0), question="Describe it")["choices"] == warm["choices"]


def test_llava15_chat_handler_form(tiny_model_path, projector_path):
    llm = Llama(tiny_model_path, chat_handler=Llava15ChatHandler(clip_model_path=projector_path), n_ctx=512,
                n_threads=N_THREADS)
    assert llm.projector is not None and "ASSISTANT:" in llm.chat_template
    out = llm.create_chat_completion([{"role": "user", "content": [
        {"type": "image_url", "image_url": data_uri(1)}, {"type": "text", "text": "hi"}]}], max_tokens=3)
    assert out["usage"]["prompt_tokens"] > IMAGE_TOKENS


def test_image_to_text_only_model_is_refused(tiny_model_path):
    llm = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)
    with pytest.raises(ValueError, match="no vision projector"):
        ask(llm, data_uri(0))


def test_media_policy_applies(llm, tmp_path):
    path = tmp_path / "pic.png"
    path.write_bytes(image_bytes(pattern_image(0)))
    with pytest.raises(MediaError, match="not allowed"):
        ask(llm, str(path))
    with pytest.raises(MediaError, match="remote image URLs are disabled"):
        ask(llm, "http://127.0.0.1:9/pic.png")
    with pytest.raises(MediaError, match="at most 8"):
        ask(llm, *[data_uri(0)] * 9)
    allowed = Llama(llm.model_path, clip_model_path=llm.projector.path, n_ctx=512, n_threads=N_THREADS,
                    media_policy=MediaPolicy(allowed_dirs=(str(tmp_path),)))
    assert ask(allowed, str(path))["choices"] == ask(llm, data_uri(0))["choices"]
