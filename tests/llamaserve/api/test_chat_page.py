"""The chat page at / in a real headless browser (Debian's chromium + chromium-driver, selenium):
it loads behind the API key (the browser signs in with Basic auth), lists the models and adapter
aliases, streams an answer from the tiny model with tokens/s, and its Stop button ends a long
generation on the server too. With a vision model (clip_model_path) it offers an attach control,
sends an attached or pasted image as an image_url part, and the model answers about that image.
Off with `web_ui: false`.

The browser is required: where chromium or chromedriver is missing these tests fail, they do not
skip (CI installs both, see .ci/run).
"""

from __future__ import annotations

import base64
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from helpers import N_THREADS
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait
from server import ServerProcess
from tiny_vision import image_bytes, pattern_image

pytestmark = [pytest.mark.server, pytest.mark.slow]

KEY = "sk-test-chat-page"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path, lora_a_path):
    config = {"api_key": KEY, "defaults": {"n_ctx": 16384, "n_threads": N_THREADS},
              "models": [{"alias": "tiny", "model": str(tiny_model_path)},
                         {"alias": "tiny-coder", "model": str(tiny_model_path),
                          "lora_adapters": [str(lora_a_path)]}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("chat_page")).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def vision_srv(tmp_path_factory, tiny_model_path, projector_path):
    config = {"api_key": KEY, "defaults": {"n_ctx": 1024, "n_threads": N_THREADS},
              "models": [{"alias": "vision", "model": str(tiny_model_path), "clip_model_path": str(projector_path)},
                         {"alias": "text", "model": str(tiny_model_path)}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("chat_page_vision")).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def picture(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("chat_page_images") / "pattern-0.png"
    path.write_bytes(image_bytes(pattern_image(0)))
    return path


@pytest.fixture(scope="module")
def browser():
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary and shutil.which(CHROMEDRIVER), \
        "the chat page tests need Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def wait_for(driver, condition: Callable, timeout: float = 60, message: str = ""):
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: condition(), message)


def status(driver) -> str:
    return driver.find_element(By.ID, "status").text


def open_page(driver, srv) -> None:
    """Sign in as a browser does: user:key@ in the URL answers the page's Basic challenge, and the
    browser then sends those credentials with the page's own API calls."""
    driver.get(f"http://chat:{KEY}@127.0.0.1:{srv.port}/")
    select = driver.find_element(By.ID, "model")
    wait_for(driver, lambda: select.get_attribute("data-loaded") == "true", message=status(driver))


def assistant_text(driver) -> str:
    replies = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant .text")
    return replies[-1].text if replies else ""


def active_sequences(srv) -> int:
    return srv.admin_state("tiny")["active_sequences"]       # tiny-coder shares tiny's engine


def test_page_is_behind_the_key(srv):
    page = httpx.get(srv.base_url + "/", timeout=30)
    assert page.status_code == 401 and page.headers["www-authenticate"].startswith("Basic ")
    basic = "Basic " + base64.b64encode(f"anyone:{KEY}".encode()).decode()
    wrong = "Basic " + base64.b64encode(b"anyone:nope").decode()
    for bad in (wrong, "Basic !!not-base64", "Basic " + base64.b64encode(KEY.encode()).decode()):   # no ":"
        assert httpx.get(srv.base_url + "/", headers={"Authorization": bad}, timeout=30).status_code == 401
    page = httpx.get(srv.base_url + "/", headers={"Authorization": basic}, timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "<script" in page.text and "http://" not in page.text.replace("http://chat", "")    # no CDN
    assert srv.get("/").status_code == 200                                        # Bearer works too
    # the API takes the browser's Basic sign-in, but not on a request another site's page started
    assert httpx.get(srv.base_url + "/v1/models", headers={"Authorization": basic}, timeout=30).status_code == 200
    cross = httpx.get(srv.base_url + "/v1/models", timeout=30,
                      headers={"Authorization": basic, "Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 401 and cross.headers["www-authenticate"] == "Bearer"
    foreign = httpx.post(srv.base_url + "/v1/chat/completions", timeout=30, content=b"{}",
                         headers={"Authorization": basic, "Origin": "http://evil.example"})
    assert foreign.status_code == 401


def test_page_lists_models_and_adapter_aliases(browser, srv):
    open_page(browser, srv)
    options = {o.get_attribute("value"): o.text for o in Select(browser.find_element(By.ID, "model")).options}
    assert set(options) == {"tiny", "tiny-coder"}
    assert "LoRA" in options["tiny-coder"] and "on tiny" in options["tiny-coder"]
    assert not browser.find_element(By.ID, "attach").is_displayed()       # the tiny model reads no images
    assert browser.title == "llamaserve chat"


def test_message_streams_an_answer_with_tokens_per_second(browser, srv):
    open_page(browser, srv)
    Select(browser.find_element(By.ID, "model")).select_by_value("tiny")
    browser.find_element(By.ID, "max-tokens").clear()
    browser.find_element(By.ID, "max-tokens").send_keys("200")
    # the text of the answer as each change reaches the page
    browser.execute_script("""
        window.seen = [];
        new MutationObserver(() => {
          const texts = document.querySelectorAll('.msg.assistant .text');
          if (texts.length) window.seen.push(texts[texts.length - 1].textContent.length);
        }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
    """)
    browser.find_element(By.ID, "prompt").send_keys("Tell me a story")
    browser.find_element(By.ID, "send").click()
    wait_for(browser, lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "idle",
             message=status(browser))
    final = assistant_text(browser)
    assert final, status(browser)
    seen = browser.execute_script("return window.seen")
    assert len({n for n in seen if 0 < n < max(seen)}) >= 5, seen         # it grew piece by piece: streamed
    assert "tok/s" in status(browser) and "error" not in browser.find_element(By.ID, "status").get_attribute("class")
    user = browser.find_elements(By.CSS_SELECTOR, ".msg.user .text")
    assert user[-1].text == "Tell me a story"
    # the conversation goes on: the second request carries the first turn
    browser.find_element(By.ID, "prompt").send_keys("And then?")
    browser.find_element(By.ID, "send").click()
    wait_for(browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done]")) == 2,
             message=status(browser))
    assert len(browser.find_elements(By.CSS_SELECTOR, ".msg.user")) == 2


def test_stop_button_stops_a_long_generation(browser, srv):
    open_page(browser, srv)
    max_tokens = browser.find_element(By.ID, "max-tokens")
    max_tokens.clear()
    max_tokens.send_keys("12000")      # ~15 s here: 3500 tokens could end before the click reached Stop
    temperature = browser.find_element(By.ID, "temperature")     # greedy: this model then never ends on its
    temperature.clear()                                           # own before 12000 tokens (sampled, it may)
    temperature.send_keys("0")
    browser.find_element(By.ID, "prompt").send_keys("Write a very long story")
    browser.find_element(By.ID, "send").click()
    wait_for(browser, lambda: len(assistant_text(browser)) > 20, message=status(browser))
    assert active_sequences(srv) == 1
    stop = browser.find_element(By.ID, "stop")
    assert stop.is_displayed() and not browser.find_element(By.ID, "send").is_displayed()
    stop.click()
    wait_for(browser, lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "idle")
    stopped = assistant_text(browser)
    time.sleep(1.0)
    assert assistant_text(browser) == stopped                             # no more text arrives
    assert "stopped" in status(browser) and "tok/s" in status(browser)
    assert browser.find_element(By.ID, "send").is_displayed() and not stop.is_displayed()
    deadline = time.monotonic() + 10
    while active_sequences(srv) and time.monotonic() < deadline:          # the server ended it too
        time.sleep(0.1)
    assert active_sequences(srv) == 0
    metrics = dict(line.rsplit(" ", 1) for line in srv.get("/metrics").text.splitlines() if line[:1] != "#")
    assert float(metrics["llamaserve_cancelled_requests_total"]) >= 1     # a client disconnect, not the end


def test_web_ui_off_is_404(tmp_path, tiny_model_path):
    proc = ServerProcess({"web_ui": False, "models": [{"alias": "tiny", "model": str(tiny_model_path)}]},
                         tmp_path).start()
    try:
        assert proc.get("/").status_code == 404
        assert proc.get("/v1/models").status_code == 200
    finally:
        proc.stop()


# -- images: a vision model ----------------------------------------------------------------

QUESTION = "What is in the picture?"
VISION_MAX_TOKENS = 12


def data_url(kind: int) -> str:
    return "data:image/png;base64," + base64.b64encode(image_bytes(pattern_image(kind))).decode()


def image_message(text: str, *urls: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}]
            + [{"type": "image_url", "image_url": {"url": u}} for u in urls]}


def api_answer(srv, model: str, messages: list[dict]) -> str:
    """The same request the page makes, through the API: greedy, so the page must show exactly this."""
    resp = srv.post("/v1/chat/completions", json={"model": model, "messages": messages, "temperature": 0,
                                                  "max_tokens": VISION_MAX_TOKENS})
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]["message"]["content"]


def greedy(driver, max_tokens: int) -> None:
    for field, value in (("max-tokens", str(max_tokens)), ("temperature", "0")):
        element = driver.find_element(By.ID, field)
        element.clear()
        element.send_keys(value)


def record_requests(driver) -> None:
    """Keep the body of each chat request the page sends in window.sent (the page calls the global fetch)."""
    driver.execute_script("""
        window.sent = [];
        const original = window.fetch;
        window.fetch = (url, init) => {
          if (String(url).endsWith('/v1/chat/completions')) window.sent.push(JSON.parse(init.body));
          return original(url, init);
        };
    """)


def pending_images(driver) -> list:
    return driver.find_elements(By.CSS_SELECTOR, "#pending img")


def paste_image(driver, png: bytes) -> bool:
    """Paste a PNG into the prompt as a browser does; True when the page took it (prevented the default)."""
    return driver.execute_script("""
        const bytes = Uint8Array.from(atob(arguments[0]), (c) => c.charCodeAt(0));
        const clipboard = new DataTransfer();
        clipboard.items.add(new File([bytes], 'pasted.png', {type: 'image/png'}));
        const event = new ClipboardEvent('paste', {clipboardData: clipboard, bubbles: true, cancelable: true});
        document.getElementById('prompt').dispatchEvent(event);
        return event.defaultPrevented;
    """, base64.b64encode(png).decode())


def send_and_wait(driver, text: str, n_answers: int) -> str:
    driver.find_element(By.ID, "prompt").send_keys(text)
    driver.find_element(By.ID, "send").click()
    wait_for(driver, lambda: len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done]")) == n_answers,
             message=status(driver))
    assert "error" not in driver.find_element(By.ID, "status").get_attribute("class"), status(driver)
    replies = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant .text")
    return replies[-1].get_attribute("textContent")           # exactly, whitespace and all


def test_attach_and_paste_only_for_a_vision_model(browser, vision_srv):
    open_page(browser, vision_srv)
    cards = {c["id"]: c for c in vision_srv.get("/v1/models").json()["data"]}
    assert cards["vision"]["capabilities"] == ["completion", "vision"]
    assert cards["text"]["capabilities"] == ["completion"]
    model = Select(browser.find_element(By.ID, "model"))
    attach = browser.find_element(By.ID, "attach")
    png = image_bytes(pattern_image(1))
    model.select_by_value("text")
    assert not attach.is_displayed()
    assert not paste_image(browser, png) and not pending_images(browser)     # a text model takes no images
    model.select_by_value("vision")
    assert attach.is_displayed()
    assert paste_image(browser, png)
    wait_for(browser, lambda: len(pending_images(browser)) == 1)
    assert pending_images(browser)[0].get_attribute("src") == data_url(1)
    browser.find_element(By.CSS_SELECTOR, "#pending figure button").click()  # × removes it
    assert not pending_images(browser)
    assert paste_image(browser, png)
    wait_for(browser, lambda: len(pending_images(browser)) == 1)
    model.select_by_value("text")                         # a model that reads no images drops them
    assert not attach.is_displayed() and not pending_images(browser)


def test_vision_model_answers_about_an_attached_image(browser, vision_srv, picture):
    open_page(browser, vision_srv)
    Select(browser.find_element(By.ID, "model")).select_by_value("vision")
    assert browser.find_element(By.ID, "attach").is_displayed()
    greedy(browser, VISION_MAX_TOKENS)
    record_requests(browser)
    browser.find_element(By.ID, "image-input").send_keys(str(picture))      # what the Image button's chooser does
    wait_for(browser, lambda: len(pending_images(browser)) == 1, message=status(browser))
    answer = send_and_wait(browser, QUESTION, 1)
    assert answer, status(browser)
    assert not pending_images(browser)                                       # sent with this message
    shown = browser.find_elements(By.CSS_SELECTOR, ".msg.user img")
    assert [img.get_attribute("src") for img in shown] == [data_url(0)]
    # the page sent the file's bytes as an image_url data: URL part ...
    sent = browser.execute_script("return window.sent")
    assert sent[0]["model"] == "vision" and sent[0]["temperature"] == 0
    assert sent[0]["max_tokens"] == VISION_MAX_TOKENS and sent[0]["stream"] is True
    assert sent[0]["messages"] == [image_message(QUESTION, data_url(0))]
    # ... and the model read it: the page shows what the API gives for that image, which is not what
    # it gives for no image or for another one
    assert answer == api_answer(vision_srv, "vision", [image_message(QUESTION, data_url(0))])
    assert answer != api_answer(vision_srv, "vision", [{"role": "user", "content": QUESTION}])
    assert answer != api_answer(vision_srv, "vision", [image_message(QUESTION, data_url(1))])

    # the conversation goes on: the next turn carries the image again, to the vision model ...
    history = [image_message(QUESTION, data_url(0)), {"role": "assistant", "content": answer}]
    second = send_and_wait(browser, "And the colours?", 2)
    assert browser.execute_script("return window.sent")[1]["messages"] == \
        history + [{"role": "user", "content": "And the colours?"}]
    assert second == api_answer(vision_srv, "vision", history + [{"role": "user", "content": "And the colours?"}])
    # ... and to a text-only model it goes as text alone (with the image the server would refuse it)
    Select(browser.find_element(By.ID, "model")).select_by_value("text")
    third = send_and_wait(browser, "Tell me more", 3)
    text_history = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": answer},
                    {"role": "user", "content": "And the colours?"}, {"role": "assistant", "content": second},
                    {"role": "user", "content": "Tell me more"}]
    assert browser.execute_script("return window.sent")[2]["messages"] == text_history
    assert third == api_answer(vision_srv, "text", text_history)


def test_a_failed_request_keeps_the_message_to_send_again(browser, vision_srv):
    """The server refuses the request (temperature out of range): the page shows the error and puts the
    typed text and the attached image back, so the message can be sent again as it was."""
    open_page(browser, vision_srv)
    Select(browser.find_element(By.ID, "model")).select_by_value("vision")
    temperature = browser.find_element(By.ID, "temperature")
    temperature.clear()
    temperature.send_keys("9")
    assert paste_image(browser, image_bytes(pattern_image(2)))
    wait_for(browser, lambda: len(pending_images(browser)) == 1)
    browser.find_element(By.ID, "prompt").send_keys("Describe it")
    browser.find_element(By.ID, "send").click()
    wait_for(browser, lambda: "error" in browser.find_element(By.ID, "status").get_attribute("class"),
             message=status(browser))
    assert browser.find_element(By.ID, "prompt").get_attribute("value") == "Describe it"
    assert [img.get_attribute("src") for img in pending_images(browser)] == [data_url(2)]
