#!/usr/bin/python3
"""The web inspector in a real browser (headless Chromium through Selenium).

Usage:
  inspector_test.py TENSORMORPHD TENSORMORPH MODELS SCREENSHOTS
                    [--make-demo TENSORMORPH_MAKE_DEMO] [--assets DIR]
                    [--fixtures DIR] [--only-formats]

Starts tensormorphd on MODELS with --http-listen on a free loopback port and
walks the page as a person would: opens a checkpoint by URL, walks the
architecture to a tensor by clicking, clicks a heatmap cell and checks that
the Scalar Inspector's fields equal `tensormorph --json scalar` for that
element (the real CLI, embedded mode); moves with the arrow keys; runs the
diff view against the full-precision source and checks that the worst tensor
shown is the worst by max error in steps of `tensormorph --json diff`; checks
that in a zoomed heatmap a click inspects the element under the pointer and
never moves the view, while a drag pans; checks the colours of +inf, -inf and
NaN cells (the shared fixture safetensors/plain, tensor f16_special); and,
with a token file, checks that the page asks for the token and then works.
The distribution view calls the values on a group's end levels "at end
level" (as many as `tensormorph stats` counts), shows the diff's clipped count
after a diff and from a link with ref=, and numbers Q8_0's codes signed.
Then issue 30's formats (MLX, NVIDIA ModelOpt, bitsandbytes LLM.int8, HQQ),
written into a temporary root by the numpy writers of tests/python/writers
and served by a second tensormorphd: each quantized weight one tree leaf
with the CLI's scheme; the tensor view's scheme, group size, parts and
backend rows as `tensormorph ls`; the Scalar Inspector as `tensormorph
scalar`, its value bit for bit the writer's expected value, the bias, zero,
SCB, block and global scale under their labels; group shading by the
scales' layout, absmax colours on the legend's ramp, the distribution as
`tensormorph stats` and the diff against the writer's source as
`tensormorph diff` (screenshots i30_*.png); --only-formats runs that part
alone.
Browse lists a safetensors directory, then the GGUF and the subdirectory
beside its shard (screenshot browse_mixed.png); --only-browse runs that
part alone.
A screenshot of every view is saved under SCREENSHOTS (PNG, named per view).

MODELS must hold the demo (tests/support/demo_checkpoint.h); with
--make-demo it is written there first when missing. --assets serves the
page from a directory (client/web) instead of the copy compiled in.
--fixtures is the shared fixtures directory (default $TENSORMORPH_FIXTURES,
else ../shared/fixtures beside the repository).
Exits non-zero with a message naming what differed; the server and the
browser are always stopped.
"""

import argparse
import hashlib
import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from urllib.parse import parse_qs, urlparse

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

CHECKPOINT = 'model-q4_k_m.gguf'
SOURCE = 'model-f32.gguf'
TENSOR = 'blk.0.attn_q.weight'
# An instrumented (ASan) server decodes several times slower; the CMake file
# sets TENSORMORPH_TEST_WAIT_SCALE for those builds so waits stretch with it.
WAIT_SCALE = float(os.environ.get('TENSORMORPH_TEST_WAIT_SCALE', '1'))
WAIT = 30


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


class Server:
    """tensormorphd with an HTTP port; the URL parsed from its stdout."""

    def __init__(self, binary, root, assets=None, token_file=None):
        args = [binary, '--root', root, '--listen', '127.0.0.1:0',
                '--http-listen', '127.0.0.1:0']
        if assets:
            args += ['--http-assets', assets]
        if token_file:
            args += ['--token-file', token_file]
        self.log = tempfile.NamedTemporaryFile(prefix='tensormorphd-', suffix='.log', delete=False)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        lines = queue.Queue()

        def pump():
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.time() + 30
        self.url = None
        while time.time() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            m = re.search(r'http on (https?://\S+)', line)
            if m:
                self.url = m.group(1).rstrip('/') + '/'
                break
        if not self.url:
            self.stop()
            with open(self.log.name) as f:
                raise Failure(f'tensormorphd printed no "http on URL" line within 30 s: {" ".join(args)}\n{f.read()[-3000:]}')

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def start_browser():
    options = webdriver.ChromeOptions()
    options.binary_location = '/usr/bin/chromium'
    for a in ('--headless=new', '--window-size=1480,1100', '--no-sandbox', '--disable-gpu',
              '--disable-dev-shm-usage', '--force-device-scale-factor=1', '--hide-scrollbars'):
        options.add_argument(a)
    options.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
    return webdriver.Chrome(service=Service('/usr/bin/chromedriver'), options=options)


class Page:
    def __init__(self, driver, base, shots):
        self.d = driver
        self.base = base
        self.shots = shots

    def open(self, query=''):
        self.d.get(self.base + query)

    def wait(self, fn, what, timeout=WAIT):
        timeout *= WAIT_SCALE
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.1).until(lambda d: fn())
        except TimeoutException:
            banner = self.banner()
            raise Failure(f'timed out after {timeout} s waiting for {what}'
                          + (f' (the page shows an error: {banner})' if banner else '')
                          + f'; URL {self.d.current_url}')

    def css(self, selector):
        return self.d.find_elements(By.CSS_SELECTOR, selector)

    def one(self, selector, what=None):
        return self.wait(lambda: (self.css(selector) or [None])[0], what or selector)

    def text(self, selector, what=None):
        """The non-empty text of the first element matching `selector`, found
        again when a repaint replaced the element between finding and reading."""
        def read():
            try:
                return ''.join(e.text for e in self.css(selector)[:1])
            except StaleElementReferenceException:
                return ''
        return self.wait(read, what or selector)

    def banner(self):
        b = self.css('#banner')
        if b and b[0].is_displayed():
            return b[0].text.replace('\n', ' ')
        return ''

    def no_error(self, where):
        b = self.banner()
        check(not b, f'{where}: the page shows an error: {b}')

    def field(self, name, root='.inspector'):
        e = self.css(f'{root} [data-field="{name}"]')
        check(e, f'the inspector shows no data-field="{name}"')
        return e[0].text.strip()

    def fields(self, root='.inspector'):
        """Every data-field under root with its text (the label and note
        beside it as 'label:NAME', 'note:NAME'), read in one call."""
        return self.d.execute_script(
            "const out = {}; for (const e of document.querySelectorAll(arguments[0] + ' [data-field]')) {"
            " out[e.dataset.field] = e.innerText.trim();"
            " const l = e.parentElement && e.parentElement.querySelector(':scope > .label');"
            " if (l) out['label:' + e.dataset.field] = l.innerText.trim();"
            " const n = e.parentElement && e.parentElement.querySelector(':scope > .note');"
            " if (n) out['note:' + e.dataset.field] = n.innerText.trim(); } return out;", root)

    def query(self):
        return {k: v[0] for k, v in parse_qs(urlparse(self.d.current_url).query).items()}

    def shot(self, name, settle=0.3):
        # Let layout and pending paints settle.
        time.sleep(settle)
        path = os.path.join(self.shots, f'{name}.png')
        self.d.save_screenshot(path)
        print(f'  screenshot {path}')


class Started:
    """What a browser test started, for run_test to stop whatever happens:
    the browser (driver), the server, then the cleanups (a temporary
    root's removal, say), last first. A test that stops one itself sets it
    back to None."""

    def __init__(self):
        self.driver = None
        self.server = None
        self.cleanups = []


def run_test(body, screenshots, failure_shot):
    """A browser test's main: runs body(started) and returns the exit
    status. A Failure prints FAIL, the browser console's last entries and
    keeps a screenshot of the page (failure_shot, a file name under
    screenshots); any other exception prints its traceback. Either way the
    browser, the server and the cleanups are stopped."""
    started = Started()
    try:
        body(started)
        return 0
    except Failure as e:
        print(f'FAIL: {e}', file=sys.stderr)
        if started.driver:
            try:
                for entry in started.driver.get_log('browser')[-20:]:
                    print(f'  browser console: {entry["level"]} {entry["message"]}', file=sys.stderr)
                started.driver.save_screenshot(os.path.join(screenshots, failure_shot))
            except Exception:  # noqa: BLE001 (the failure is what matters)
                pass
        return 1
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    finally:
        if started.driver:
            started.driver.quit()
        if started.server:
            started.server.stop()
        for cleanup in reversed(started.cleanups):
            cleanup()


def demo_arguments(doc):
    """The command line of a browser test on the demo: TENSORMORPHD
    TENSORMORPH MODELS SCREENSHOTS [--make-demo BIN] [--assets DIR]."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('tensormorphd')
    ap.add_argument('tensormorph')
    ap.add_argument('models')
    ap.add_argument('screenshots')
    ap.add_argument('--make-demo')
    ap.add_argument('--assets')
    return ap


def have_demo(a, checkpoint):
    """Whether a.models holds the demo (its `checkpoint`), written by
    a.make_demo when missing; without one to write it, says FAIL."""
    if os.path.exists(os.path.join(a.models, checkpoint)):
        return True
    if not a.make_demo:
        print(f'FAIL: {a.models} holds no {checkpoint} (give --make-demo to write the demo)', file=sys.stderr)
        return False
    subprocess.run([a.make_demo, a.models], check=True, stdout=subprocess.DEVNULL)
    return True


def run_cli(cli, *args):
    r = subprocess.run([cli, '--json', *args], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise Failure(f'{cli} --json {" ".join(args)} exited {r.returncode}: {r.stderr.strip()}')
    return r.stdout


def same_number(page_text, cli_value):
    """The page prints the shortest text of a double; the CLI the JSON mapping."""
    try:
        return float(page_text) == float(cli_value)
    except ValueError:
        return page_text == str(cli_value)


def compare_inspector(page, cli, models, tensor, index, checkpoint=CHECKPOINT):
    out = json.loads(run_cli(cli, 'scalar', os.path.join(models, checkpoint), tensor,
                             ','.join(map(str, index))))
    sc = out['scalars'][0]
    shown_fields = page.fields()

    def shown_field(name):
        check(name in shown_fields, f'the inspector shows no data-field="{name}"')
        return shown_fields[name]

    shown = shown_field('index')
    check(shown == '[' + ', '.join(map(str, index)) + ']',
          f'inspector index {shown}, expected {index}')
    pairs = {
        'flat_index': 'flatIndex', 'raw_code': 'rawCode', 'code_bits': 'codeBits', 'block': 'block',
        'sub_block': 'subBlock', 'group': 'group', 'scale': 'scale', 'zero_point': 'zeroPoint',
        'offset': 'offset', 'level': 'level', 'step': 'step', 'step_below': 'stepBelow',
        'step_above': 'stepAbove', 'range_min': 'rangeMin', 'range_max': 'rangeMax', 'value': 'value',
    }
    for field, key in pairs.items():
        got = shown_field(field)
        check(same_number(got, sc[key]),
              f'{tensor}{index}: inspector {field} = {got!r}, tensormorph --json scalar {key} = {sc[key]!r}')
    for p in sc.get('params', []):
        got = shown_field(f'param_{p["name"]}')
        check(same_number(got, p['value']), f'{tensor}{index}: param {p["name"]} = {got!r}, CLI {p["value"]!r}')
    bits = shown_field('raw_binary').replace(' ', '')
    check(int(bits, 2) == int(sc['rawBits']), f'raw bits {bits} != {sc["rawBits"]}')
    check(len(bits) == int(sc['codeBits']), f'binary has {len(bits)} digits, code_bits {sc["codeBits"]}')
    return sc


def inspector_ready(page, index):
    want = ','.join(map(str, index))
    return page.wait(lambda: page.css(f'.inspector[data-state="ready"][data-index="{want}"]'),
                     f'the inspector to show [{want}]')


def heatmap_ready(page, after=None):
    def ready():
        e = page.css('.heatmap[data-ready]')
        if not e:
            return None
        if after is not None and int(e[0].get_attribute('data-ready')) <= after:
            return None
        return int(e[0].get_attribute('data-ready'))
    return page.wait(ready, 'the heatmap to draw')


def click_element_cell(page, row, col, rows, cols):
    """Clicks the middle of element (row, col) on the heatmap's overlay."""
    overlay = page.one('.heatmap-overlay')
    w = overlay.size['width']
    h = overlay.size['height']
    x = (col + 0.5) / cols * w
    y = (row + 0.5) / rows * h
    # Selenium 4 offsets are from the element's centre.
    ActionChains(page.d).move_to_element_with_offset(overlay, int(x - w / 2), int(y - h / 2)).click().perform()


PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1',
           '#ff9da7', '#9c755f', '#bab0ac']


def expected_group_colours(groups, width, height):
    """The group shading rule, written again from its statement: cells
    row-major; a group seen first takes the first palette index from id mod
    10 upward (cycling) whose colour its left and upper neighbour cells'
    groups (other groups only) do not have; id -1 grey."""
    colour = {}
    for i in range(height):
        for j in range(width):
            g = groups[i * width + j]
            if g in colour:
                continue
            if g == -1:
                colour[g] = '#808080'
                continue
            taken = set()
            if j > 0 and groups[i * width + j - 1] != g:
                taken.add(colour[groups[i * width + j - 1]])
            if i > 0 and groups[(i - 1) * width + j] != g:
                taken.add(colour[groups[(i - 1) * width + j]])
            pick = next((PALETTE[(g % 10 + k) % 10] for k in range(10) if PALETTE[(g % 10 + k) % 10] not in taken),
                        PALETTE[g % 10])
            colour[g] = pick
    return [colour[g] for g in groups]


def check_group_colours(page):
    """Cells of the group heatmap on the canvas have the rule's colours."""
    q = page.query()
    reply = page.d.execute_async_script(
        "const done = arguments[arguments.length - 1]; const h = document.querySelector('.heatmap');"
        "const [w, hh] = h.dataset.cells.split('x').reverse().map(Number);"
        "fetch('v1/GetHeatmap', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify("
        "{checkpoint: arguments[0], tensor: arguments[1], mode: 'HEATMAP_MODE_GROUP', width: w, height: hh})})"
        ".then((r) => r.json()).then(done).catch((e) => done({error: String(e)}));", q['checkpoint'], q['tensor'])
    check('groups' in reply, f'GetHeatmap from the page failed: {reply}')
    w, h = reply['width'], reply['height']
    want = expected_group_colours([int(g) for g in reply['groups']], w, h)
    got = page.d.execute_script(
        "const c = document.querySelector('.heatmap-canvas'); const g = c.getContext('2d');"
        "const d = g.getImageData(0, 0, c.width, c.height).data; const w = arguments[0], h = arguments[1];"
        "const out = []; for (let i = 0; i < h; i++) for (let j = 0; j < w; j++) {"
        " const x = Math.floor((j + 0.5) * c.width / w), y = Math.floor((i + 0.5) * c.height / h);"
        " const o = 4 * (y * c.width + x);"
        " out.push('#' + [d[o], d[o + 1], d[o + 2]].map((v) => v.toString(16).padStart(2, '0')).join('')); }"
        "return out;", w, h)
    bad = [(k // w, k % w, got[k], want[k]) for k in range(w * h) if got[k] != want[k]]
    check(not bad, f'group shading differs from the palette rule in {len(bad)} of {w * h} cells, '
          f'e.g. (cell row, col, drawn, expected) {bad[:3]}')


def overlay_at(page, x, y):
    """An action chain with the pointer at (x, y) CSS pixels from the
    overlay's top left corner (Selenium 4 offsets are from its centre)."""
    overlay = page.one('.heatmap-overlay')
    w, h = overlay.size['width'], overlay.size['height']
    return ActionChains(page.d).move_to_element_with_offset(overlay, int(round(x - w / 2)), int(round(y - h / 2)))


def test_zoomed_click(page, cli, models):
    """In a zoomed view whose edges fall inside elements (after a pan by half
    an element), a click inspects the element under the pointer, the ones
    the edges cut included, and never moves the view; a press that wobbles a
    pixel or two is still a click; only a drag pans."""
    print('zoomed heatmap: a click inspects, never moves the view')
    tensor = 'blk.0.ffn_down.weight'  # [256, 512]
    page.open(f'?checkpoint={CHECKPOINT}&tensor={tensor}&view=heatmap&region=100:110,200:210')
    heatmap_ready(page)
    check(page.one('.heatmap').get_attribute('data-edges') == '100:110,200:210',
          f'region=100:110,200:210 in the URL drew {page.one(".heatmap").get_attribute("data-edges")}')
    overlay = page.one('.heatmap-overlay')
    w, h = overlay.size['width'], overlay.size['height']
    # Drag up and left by half an element: the view shows rows 100.5-110.5
    # and columns 200.5-210.5, the URL the elements it touches.
    dx, dy = round(w / 20), round(h / 20)
    before = heatmap_ready(page)
    ActionChains(page.d).move_to_element(overlay).click_and_hold().move_by_offset(-dx // 2, -dy // 2) \
        .move_by_offset(-(dx - dx // 2), -(dy - dy // 2)).release().perform()
    want_region = '100:111,200:211'
    page.wait(lambda: page.query().get('region') == want_region,
              f'region={want_region} in the URL after dragging by half an element')
    ready = heatmap_ready(page, after=before)
    check('index' not in page.query(), f'a drag picked an element: index={page.query().get("index")}')
    edges = page.one('.heatmap').get_attribute('data-edges')
    check(edges == want_region, f'after the pan the reply covers {edges}, the region is {want_region}')
    r0 = 100 + dy * 10 / h  # the shown region, fractional
    c0 = 200 + dx * 10 / w

    def pixel(row, col):
        # The middle of the element's visible part.
        x = ((max(col, c0) + min(col + 1, c0 + 10)) / 2 - c0) / 10 * w
        y = ((max(row, r0) + min(row + 1, r0 + 10)) / 2 - r0) / 10 * h
        return x, y

    clicks = [
        ([100, 200], (2, 2), 'the top left element, cut by both edges, pressed with a 2-pixel wobble'),
        ([110, 210], (0, 0), 'the bottom right element, cut by both edges'),
        ([104, 207], (0, 0), 'an element inside'),
        ([100, 205], (0, 0), 'an element cut by the top edge'),
    ]
    for index, (jx, jy), what in clicks:
        x, y = pixel(*index)
        chain = overlay_at(page, x, y).click_and_hold()
        if jx or jy:
            chain = chain.move_by_offset(jx, jy)
        chain.release().perform()
        want = ','.join(map(str, index))
        page.wait(lambda: page.query().get('index') == want,
                  f'index={want} in the URL after clicking {what}')
        inspector_ready(page, index)
        time.sleep(0.3)  # a move would show in the URL within 0.2 s
        check(page.query().get('region') == want_region,
              f'clicking {what} ({index}) moved the view: region={page.query().get("region")}, was {want_region}')
        if index == [100, 200]:
            compare_inspector(page, cli, models, tensor, index)
    # Nor later, nor redrawn.
    time.sleep(0.5)
    check(page.query().get('region') == want_region, f'the clicks moved the view to region={page.query().get("region")}')
    check(page.one('.heatmap').get_attribute('data-edges') == want_region and heatmap_ready(page) == ready,
          f'the clicks redrew the heatmap (reply covers {page.one(".heatmap").get_attribute("data-edges")})')
    page.no_error('zoomed clicks')
    page.shot('heatmap_zoomed_click')


def fixtures_dir(given):
    """--fixtures, $TENSORMORPH_FIXTURES, or ../shared/fixtures beside the repository."""
    if given:
        return given
    if os.environ.get('TENSORMORPH_FIXTURES'):
        return os.environ['TENSORMORPH_FIXTURES']
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(os.path.dirname(repo), 'shared', 'fixtures')


RGB = re.compile(r'rgb\((\d+), (\d+), (\d+)\)')


def test_non_finite(driver, server_bin, fixtures, assets, shots):
    """f16_special (0, -0, 1, -2.5, 65504, subnormals, +inf, -inf, NaN): the
    finite cells on the legend's ramp between the finite min and max, +inf
    at its top end's colour, -inf at its bottom end's, NaN #ff00ff, whatever
    the reply's min and max say."""
    print('non-finite cells on the value heatmap')
    plain = os.path.join(fixtures, 'safetensors', 'plain')
    check(os.path.isfile(os.path.join(plain, 'model.safetensors')),
          f'no fixture {plain}/model.safetensors (give --fixtures or $TENSORMORPH_FIXTURES)')
    server = Server(server_bin, plain, assets)
    try:
        page = Page(driver, server.url, shots)
        page.open('?checkpoint=model.safetensors&tensor=f16_special&view=heatmap')
        heatmap_ready(page)
        page.no_error('f16_special heatmap')
        cells = page.one('.heatmap').get_attribute('data-cells')
        check(cells == '1x10', f'the f16_special heatmap has {cells} cells, expected 1x10 (one per element)')
        reply = page.d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch('v1/GetHeatmap', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify("
            "{checkpoint: 'model.safetensors', tensor: 'f16_special', mode: 'HEATMAP_MODE_MEAN', width: 10, height: 1})})"
            ".then((r) => r.json()).then(done).catch((e) => done({error: String(e)}));")
        check('values' in reply, f'GetHeatmap from the page failed: {reply}')
        values = [float(v) for v in reply['values']]
        check(values[7] == float('inf') and values[8] == float('-inf') and values[9] != values[9],
              f'f16_special is not (..., inf, -inf, nan): {reply["values"]}')
        finite = [v for v in values if v - v == 0]
        lo, hi = min(finite), max(finite)
        check(page.field('bar_min', '.colour-bar') == '-2.5' and page.field('bar_max', '.colour-bar') == '65504',
              f'the legend spans {page.field("bar_min", ".colour-bar")}..{page.field("bar_max", ".colour-bar")}, '
              f'the finite values {lo}..{hi}')
        check('3 cells not finite' in page.one('.colour-bar [data-field="non_finite"]').text,
              f'the legend says {page.one(".colour-bar").text!r}')
        ramp = [tuple(int(c) for c in m) for m in RGB.findall(page.d.execute_script(
            "return getComputedStyle(document.querySelector('.colour-bar .gradient')).backgroundImage;"))]
        check(len(ramp) >= 2, f'no ramp colours in the legend gradient: {ramp}')
        got = page.d.execute_script(
            "const c = document.querySelector('.heatmap-canvas'); const g = c.getContext('2d');"
            "const d = g.getImageData(0, 0, c.width, c.height).data; const out = [];"
            "for (let j = 0; j < 10; j++) { const x = Math.floor((j + 0.5) * c.width / 10), y = Math.floor(c.height / 2);"
            " const o = 4 * (y * c.width + x); out.push([d[o], d[o + 1], d[o + 2]]); } return out;")
        got = [tuple(p) for p in got]

        def on_ramp(t):
            t = min(1.0, max(0.0, t)) * (len(ramp) - 1)
            i = min(len(ramp) - 2, int(t))
            f = t - i
            return tuple(a + (b - a) * f for a, b in zip(ramp[i], ramp[i + 1]))

        for j, v in enumerate(values):
            if v != v:
                want, what = (255, 0, 255), 'NaN: magenta #ff00ff'
            elif v == float('inf'):
                want, what = ramp[-1], '+inf: the ramp\'s top end'
            elif v == float('-inf'):
                want, what = ramp[0], '-inf: the ramp\'s bottom end'
            else:
                want, what = on_ramp((v - lo) / (hi - lo)), f'{v} on the ramp {lo}..{hi}'
            non_finite = v - v != 0  # inf - inf and NaN - NaN are NaN
            ok = got[j] == want if non_finite else all(abs(a - b) <= 1 for a, b in zip(got[j], want))
            check(ok, f'f16_special[{j}] = {v} is drawn {got[j]}, expected {tuple(round(x) for x in want)} ({what})')
        page.shot('heatmap_non_finite')
    finally:
        server.stop()


def test_walk_and_inspect(page, cli, models):
    print('browse')
    page.open('')
    page.one('tr[data-checkpoint]', 'the checkpoint list')
    names = [e.get_attribute('data-checkpoint') for e in page.css('tr[data-checkpoint]')]
    check(CHECKPOINT in names and SOURCE in names, f'browse lists {names}, missing {CHECKPOINT} or {SOURCE}')
    page.no_error('browse')
    page.shot('browse')

    print('architecture, opened by URL')
    page.open(f'?checkpoint={CHECKPOINT}')
    page.one('.tree-row[data-path="blk"]', 'the module tree')
    page.no_error('architecture')
    check(page.css('.tree-row.boundary'), 'the architecture shows no boundary marker (Q4_K_M mixes schemes)')
    check(page.css('.scheme-count[data-scheme="Q4_K"]') and page.css('.scheme-count[data-scheme="Q6_K"]'),
          'the summary does not count Q4_K and Q6_K tensors')
    page.shot('architecture')
    # Walk down by clicking: collapse first so the walk is real.
    for b in page.css('.toolbar button'):
        if b.text == 'Collapse all':
            b.click()
    parts = TENSOR.split('.')
    for i in range(1, len(parts)):
        path = '.'.join(parts[:i])
        row = page.one(f'.tree-row[data-path="{path}"]', f'tree node {path}')
        if row.get_attribute('data-expanded') == 'false':
            row.click()
        page.one(f'.tree-row[data-path="{path}"][data-expanded="true"]', f'{path} expanded')
    page.one(f'.tree-row[data-path="{TENSOR}"][data-leaf="true"]').click()
    page.wait(lambda: page.query().get('tensor') == TENSOR, 'the tensor view after clicking the tensor')

    print('tensor')
    page.one('.view-tensor [data-field="scheme"]', 'the tensor facts')
    check(page.field('scheme', '.view-tensor') == 'Q4_K', f'scheme {page.field("scheme", ".view-tensor")}')
    check(page.field('shape', '.view-tensor') == '[256, 256]', f'shape {page.field("shape", ".view-tensor")}')
    check(page.css('tr[data-part]'), 'no stored part listed')
    # The download link's .npy is the CLI's, byte for byte.
    digest = page.d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const a = [...document.querySelectorAll('.actions a')].find((x) => x.textContent === 'download .npy');"
        "fetch(a.href).then((r) => r.arrayBuffer()).then((b) => crypto.subtle.digest('SHA-256', b))"
        ".then((h) => done([...new Uint8Array(h)].map((x) => x.toString(16).padStart(2, '0')).join('')))"
        ".catch((e) => done('error: ' + e));")
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, 't.npy')
        r = subprocess.run([cli, 'read', os.path.join(models, CHECKPOINT), TENSOR, '-o', npy],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f'tensormorph read -o failed: {r.stderr.strip()}')
        with open(npy, 'rb') as f:
            want = hashlib.sha256(f.read()).hexdigest()
    check(digest == want, f'the page\'s .npy link gives sha256 {digest}, tensormorph read -o {want}')
    page.no_error('tensor')
    page.shot('tensor')

    print('heatmap: click a cell')
    page.one('nav a[data-view="heatmap"]').click()
    heatmap_ready(page)
    page.no_error('heatmap')
    page.shot('heatmap')
    row, col = 37, 100
    click_element_cell(page, row, col, 256, 256)
    inspector_ready(page, [row, col])
    check(page.query().get('index') == f'{row},{col}', f'URL index {page.query().get("index")}, expected {row},{col}')
    compare_inspector(page, cli, models, TENSOR, [row, col])
    page.shot('inspector')

    print('arrow keys')
    page.d.find_element(By.TAG_NAME, 'body').send_keys(Keys.ARROW_RIGHT)
    inspector_ready(page, [row, col + 1])
    compare_inspector(page, cli, models, TENSOR, [row, col + 1])
    page.d.find_element(By.TAG_NAME, 'body').send_keys(Keys.ARROW_DOWN)
    inspector_ready(page, [row + 1, col + 1])
    check(page.query().get('index') == f'{row + 1},{col + 1}', f'URL index after arrows: {page.query().get("index")}')
    compare_inspector(page, cli, models, TENSOR, [row + 1, col + 1])

    print('heatmap modes')
    for mode in ('group', 'absmax', 'zeros'):
        page.one(f'.segmented button[data-mode="{mode}"]').click()
        page.wait(lambda: page.query().get('mode') == mode, f'mode={mode} in the URL')
        heatmap_ready(page)
        page.no_error(f'heatmap mode {mode}')
        if mode == 'group':
            check_group_colours(page)
        page.shot(f'heatmap_{mode}')

    print('back and forward')
    page.d.back()
    page.wait(lambda: page.query().get('mode') == 'absmax', 'mode=absmax after going back')
    heatmap_ready(page)
    check(page.css('.segmented button.active[data-mode="absmax"]'), 'going back did not show the absmax heatmap')
    page.d.forward()
    page.wait(lambda: page.query().get('mode') == 'zeros', 'mode=zeros after going forward')
    heatmap_ready(page)

    print('hover')
    overlay = page.one('.heatmap-overlay')
    w, h = overlay.size['width'], overlay.size['height']
    ActionChains(page.d).move_to_element_with_offset(
        overlay, int((200.5 / 256) * w - w / 2), int((10.5 / 256) * h - h / 2)).perform()
    tip = page.wait(lambda: page.css('.heatmap-tip:not([hidden])'), 'the hover tooltip')[0].text
    check('[10, 200]' in tip, f'hovering element [10, 200] shows {tip!r}')

    print('zoom')
    page.one('.segmented button[data-mode="value"]').click()
    first = heatmap_ready(page)
    overlay = page.one('.heatmap-overlay')
    page.d.execute_script(
        "const o = arguments[0]; const r = o.getBoundingClientRect();"
        "for (let k = 0; k < 4; k++) o.dispatchEvent(new WheelEvent('wheel', {deltaY: -240, clientX: r.left + r.width * 0.3,"
        " clientY: r.top + r.height * 0.3, bubbles: true, cancelable: true}));", overlay)
    heatmap_ready(page, after=first)
    region = page.wait(lambda: page.query().get('region'), 'region= in the URL after zooming')
    m = re.match(r'(\d+):(\d+),(\d+):(\d+)$', region)
    check(m and int(m.group(2)) - int(m.group(1)) < 256, f'zoomed region {region}')
    # The server drew that region alone (GetHeatmapRequest.row_begin...),
    # at one cell per element now that it is smaller than the canvas.
    edges = page.one('.heatmap').get_attribute('data-edges')
    check(edges == region, f'the zoomed heatmap reply covers {edges}, the region asked for is {region} '
          '(does the server honour GetHeatmapRequest.row_begin/row_end/col_begin/col_end?)')
    page.no_error('zoom')
    page.shot('heatmap_zoomed')

    print('distribution')
    page.one('nav a[data-view="dist"]').click()
    page.one('svg[data-role="histogram"]', 'the histogram')
    page.no_error('distribution')
    # Count axes start at 0, never "-0" (a tick of ceil(-1e-9) * step).
    counts = [e.text for e in page.css('svg .tick-label') if e.text.strip()]
    check(counts and '-0' not in counts, f'tick labels {counts} read "-0"')
    check_end_levels(page, cli, models, CHECKPOINT, TENSOR)
    # No diff in this tab and no source in the URL: no clipping to show.
    page.one('.facts [data-field="clipped"][data-state="none"]', 'the clipped count saying it needs a source')
    page.shot('distribution')
    page.one('#dist-group').send_keys('24')
    page.one('#dist-group').send_keys(Keys.ENTER)
    page.wait(lambda: page.query().get('group') == '24', 'group=24 in the URL')
    page.one('svg[data-role="histogram"] line.level', 'levels drawn on the histogram of one group')
    page.no_error('distribution of group 24')
    page.shot('distribution_group')


CLIPPED_DEFINITION = ('a source value the format could not represent within its group\'s range')


def check_end_levels(page, cli, models, checkpoint, tensor):
    """The distribution view calls the values on the end levels "at end
    level", as many as `tensormorph --json stats` counts; "clipping" is no
    label of it, and the histogram's markers say "at the lowest/highest
    level"."""
    st = json.loads(run_cli(cli, 'stats', os.path.join(models, checkpoint), tensor))
    low, high = int(st.get('saturatedLow', 0)), int(st.get('saturatedHigh', 0))
    labels = [e.text.strip() for e in page.css('.facts dt')]
    check('at end level' in labels, f'the distribution facts are {labels}, with no "at end level"')
    check(not any('clip' in l and l != 'clipped' for l in labels) and not any('saturat' in l for l in labels),
          f'the distribution facts still call end levels clipping: {labels}')
    shown = page.one('.facts [data-field="at_end_level"]').text
    check(shown.startswith(f'{low + high:,} ({low:,} lowest, {high:,} highest)'),
          f'{tensor}: "at end level" shows {shown!r}, tensormorph stats {low} + {high}')
    for mark in page.css('svg[data-role="histogram"] .end-label'):
        check('clip' not in mark.text and ' level (' in mark.text, f'a histogram marker says {mark.text!r}')
    caption = ' '.join(e.text for e in page.css('figcaption'))
    check('(clipping)' not in caption, f'the caption calls the end levels clipping: {caption!r}')


def check_clipped(page, report, source):
    """The distribution's clipped count is the diff's, with the definition
    as its tooltip."""
    dd = page.one('.facts [data-field="clipped"][data-state="ready"]', 'the diff\'s clipped count')
    want = int(report.get('clipped', 0))
    check(int(dd.get_attribute('data-value')) == want,
          f'{report["name"]}: the distribution says {dd.get_attribute("data-value")} clipped, '
          f'tensormorph --json diff {want}')
    check(CLIPPED_DEFINITION in (dd.get_attribute('title') or ''), f'the clipped count\'s tooltip is {dd.get_attribute("title")!r}')
    check(source in dd.text, f'the clipped count does not name its source {source}: {dd.text!r}')


def test_distribution_codes(page, cli, models):
    """Q8_0's codes are signed: the level usage is drawn from -128 up, as the
    Scalar Inspector shows the codes."""
    print('distribution: signed codes')
    checkpoint, tensor = 'model-q8_0.gguf', 'blk.0.attn_q.weight'
    page.open(f'?checkpoint={checkpoint}&tensor={tensor}&view=dist')
    bars = page.one('svg[data-role="code-usage"]', 'the level usage')
    check(bars.get_attribute('data-signed') == 'true', 'Q8_0 level usage is not drawn as signed codes')
    codes = [int(r.get_attribute('data-code')) for r in page.css('svg[data-role="code-usage"] rect[data-code]')]
    check(codes == list(range(-128, 128)), f'Q8_0 code bars run {codes[:3]} ... {codes[-3:]}, not -128 ... 127')
    st = json.loads(run_cli(cli, 'stats', os.path.join(models, checkpoint), tensor))
    hist = [int(c) for c in st['codeHistogram']]
    sc = json.loads(run_cli(cli, 'scalar', os.path.join(models, checkpoint), tensor, '0,0'))['scalars'][0]
    code = int(sc['rawCode'])
    title = page.one(f'svg[data-role="code-usage"] rect[data-code="{code}"] title').get_attribute('textContent')
    check(title == f'code {code}: {hist[code % 256]:,}',
          f'the bar of the inspector\'s code {code} says {title!r}, stats counts {hist[code % 256]}')
    check_end_levels(page, cli, models, checkpoint, tensor)
    page.no_error('distribution of Q8_0')
    page.shot('distribution_signed_codes')


def test_diff(page, cli, models):
    print('diff')
    out = run_cli(cli, 'diff', os.path.join(models, CHECKPOINT), os.path.join(models, SOURCE))
    reports = [json.loads(l)['tensor'] for l in out.splitlines() if l.strip() and 'tensor' in json.loads(l)]
    check(reports, 'tensormorph --json diff reported no tensor')
    worst_value = max(float(r['maxErrSteps']) for r in reports)
    worst_names = {r['name'] for r in reports if float(r['maxErrSteps']) == worst_value}

    page.open(f'?checkpoint={CHECKPOINT}&view=diff&ref={SOURCE}')
    page.one('#diff-run').click()
    page.one('[data-field="worst_tensor"]', 'the diff summary')
    page.no_error('diff')
    rows = page.css('.diff-rows tr[data-name]')
    check(len(rows) == len(reports), f'the diff view shows {len(rows)} tensors, the CLI {len(reports)}')
    top = rows[0].get_attribute('data-name')
    check(top in worst_names,
          f'the diff view shows {top} first (sorted by max error in steps), tensormorph diff says {sorted(worst_names)} '
          f'({worst_value} steps)')
    progress = page.text('[data-field="progress"]')
    check(f'{len(reports)} of {len(reports)} tensors' in progress, f'the progress line says {progress!r} at the end')
    summary_worst = page.text('[data-field="worst_tensor"]')
    check(summary_worst in worst_names, f'the summary names {summary_worst} worst, the CLI {sorted(worst_names)}')
    page.shot('diff')

    print('diff row -> error heatmap with its worst elements')
    # Found again by name: the table may be redrawn (the last progress
    # repaint) after `rows` was read, which leaves those elements stale.
    page.one(f'.diff-rows tr[data-name="{top}"]', 'the worst row').click()
    page.wait(lambda: page.query().get('mode') == 'error' and page.query().get('tensor') == top, 'the error heatmap')
    heatmap_ready(page)
    page.one('[data-role="worst"] tr[data-worst]', 'the worst elements')
    page.no_error('error heatmap')
    second = page.css('[data-role="worst"] tr[data-worst]')[1]
    idx = [int(x) for x in second.get_attribute('data-index').split(',')]
    second.click()
    inspector_ready(page, idx)
    page.one('.inspector [data-field="error_steps"]', 'the error in steps beside the source')
    # The inspector's source value and error in steps are the diff's.
    report = next(r for r in reports if r['name'] == top)
    w = next(w for w in report['worst'] if [int(x) for x in w['index']] == idx)
    got = page.field('error_steps')
    check(abs(float(got)) == float(w['errSteps']),
          f'{top}{idx}: the inspector says {got} steps, tensormorph --json diff {w["errSteps"]}')
    got = page.field('source')
    check(float(got) == float(w['source']), f'{top}{idx}: source {got} in the inspector, {w["source"]} in the diff')
    page.shot('diff_heatmap')

    print('distribution: the diff\'s clipped count')
    page.one('nav a[data-view="dist"]').click()
    page.wait(lambda: page.query().get('view') == 'dist', 'the distribution view')
    page.one('svg[data-role="histogram"]', 'the histogram')
    check_clipped(page, report, SOURCE)
    check_end_levels(page, cli, models, CHECKPOINT, top)
    page.no_error('distribution after the diff')
    page.shot('distribution_clipped')

    print('architecture coloured by the diff')
    page.one('nav a[data-view="arch"]').click()
    select = page.one('#arch-metric')
    page.wait(lambda: select.is_enabled(), 'the metric selector to be enabled after the diff')
    select.find_element(By.CSS_SELECTOR, 'option[value="max_err_steps"]').click()
    page.wait(lambda: page.query().get('metric') == 'max_err_steps', 'metric in the URL')
    page.one(f'.tree-row[data-path="{top}"] .metric', 'the metric column')
    page.shot('architecture_diff')


def test_distribution_link(page, cli, models):
    """A shared link with ref= shows the clipped count of a diff of that
    tensor alone (a fresh tab keeps no diff)."""
    print('distribution: a link with a source')
    out = run_cli(cli, 'diff', os.path.join(models, CHECKPOINT), os.path.join(models, SOURCE))
    reports = [json.loads(l)['tensor'] for l in out.splitlines() if l.strip() and 'tensor' in json.loads(l)]
    # The tensor with the most clipped elements, so that a count of 0 would
    # not pass by chance.
    report = max(reports, key=lambda r: (int(r.get('clipped', 0)), r['name']))
    page.open(f'?checkpoint={CHECKPOINT}&tensor={report["name"]}&view=dist&ref={SOURCE}')
    check_clipped(page, report, SOURCE)
    page.no_error('distribution link with a source')
    page.shot('distribution_link_clipped')


def test_sparsity_and_errors(page):
    print('sparsity')
    page.open(f'?checkpoint={CHECKPOINT}&tensor=blk.0.ffn_down.weight&view=sparsity&ref={SOURCE}')
    page.one('.view-sparsity [data-field="induced_zeros"]', 'the induced zeros count')
    heatmap_ready(page)
    check(page.css('.view-sparsity .colour-bar .swatch'),
          'the zeros heatmap with a source shows no pruned/induced legend '
          '(does the server fill GetHeatmapResponse.pruned in HEATMAP_MODE_ZEROS?)')
    page.no_error('sparsity')
    page.shot('sparsity')

    print('sparsity of every tensor')
    page.open(f'?checkpoint={CHECKPOINT}&view=sparsity&ref={SOURCE}')
    page.wait(lambda: len(page.css('.view-sparsity tr[data-name]')) == 21, 'the 21 tensors counted')
    page.no_error('sparsity of every tensor')
    page.shot('sparsity_checkpoint')

    print('a link whose values break their rules says so')
    for query, key in ((f'view=heatmap&index=abc', 'index'), (f'view=heatmap&mode=bogus', 'mode'),
                       (f'view=heatmap&index=99999999999999999999,1', 'index'),
                       (f'view=heatmap&region=500:400,0:10', 'region'), (f'view=dist&group=abc', 'group')):
        page.open(f'?checkpoint={CHECKPOINT}&tensor={TENSOR}&{query}')
        page.wait(lambda: page.banner(), f'the error banner for {query}')
        reason = page.one('#banner [data-field="error_reason"]').text
        message = page.one('#banner [data-field="error_message"]').text
        check(reason == 'REQUEST_INVALID' and f"link's {key}=" in message,
              f'{query}: banner {reason} {message!r}, expected REQUEST_INVALID naming {key}')
    page.shot('error_link_values')

    print('an unknown tensor shows the error')
    page.open(f'?checkpoint={CHECKPOINT}&tensor=blk.0.attn_q.weigth&view=tensor')
    page.wait(lambda: page.banner(), 'the error banner')
    code = page.one('#banner [data-field="error_code"]').text
    check(code == 'NOT_FOUND', f'error code {code}, expected NOT_FOUND')
    reason = page.one('#banner [data-field="error_reason"]').text
    check(reason == 'TENSOR_NOT_FOUND', f'error reason {reason}, expected TENSOR_NOT_FOUND')
    page.shot('error')


def test_browse_mixed(driver, server_bin, models, assets, shots):
    """Issue 33 point 6: a safetensors directory with a GGUF and a
    subdirectory beside its shard lists them all, the directory first
    (under the roots and with dir=), and clicking the directory opens its
    safetensors; an empty .gguf is listed as broken."""
    print('browse: a safetensors directory with more beside it')
    root = tempfile.mkdtemp(prefix='tm-web-mixed-')
    server = None
    try:
        mixed = os.path.join(root, 'mixed')
        os.makedirs(os.path.join(mixed, 'sub'))
        shutil.copy(os.path.join(models, 'source', 'model.safetensors'), mixed)
        shutil.copy(os.path.join(models, CHECKPOINT), os.path.join(mixed, 'b.gguf'))
        shutil.copy(os.path.join(models, SOURCE), os.path.join(mixed, 'sub', 'c.gguf'))
        # A file the listing finds broken is listed, marked so.
        open(os.path.join(mixed, 'sub', 'a.gguf'), 'wb').close()
        server = Server(server_bin, root, assets)
        page = Page(driver, server.url, shots)
        want = ['mixed', 'mixed/b.gguf', 'mixed/sub/a.gguf', 'mixed/sub/c.gguf']
        for query in ('', '?dir=mixed'):
            page.open(query)
            page.wait(lambda: len(page.css('tr[data-checkpoint]')) == len(want),
                      f'{len(want)} rows in the checkpoint list ({query or "every root"})')
            rows = page.css('tr[data-checkpoint]')
            names = [e.get_attribute('data-checkpoint') for e in rows]
            check(names == want, f'browse {query or "every root"} lists {names}, expected {want}')
            formats = [r.find_elements(By.CSS_SELECTOR, 'td')[1].text for r in rows]
            check(formats == ['safetensors', 'gguf', 'gguf', 'gguf'], f'browse shows formats {formats}')
            counts = [r.find_elements(By.CSS_SELECTOR, 'td')[4].text for r in rows]
            check(counts[2] == 'broken' and counts[1] not in ('broken', '—'),
                  f'browse shows stored tensors {counts}: the empty a.gguf as broken')
            marked = rows[2].find_elements(By.CSS_SELECTOR, 'td .broken')
            check(marked and 'shorter than a GGUF header' in (marked[0].get_attribute('title') or ''),
                  'the broken mark carries what the listing found')
            page.no_error('browse of a mixed directory')
        page.shot('browse_mixed')
        page.css('tr[data-checkpoint="mixed"]')[0].click()
        page.one('.tree-row[data-path="model"]', 'the safetensors module tree of mixed')
        check(page.query().get('checkpoint') == 'mixed', f'the click opened {page.query()}')
        page.no_error('the mixed directory opened')
    finally:
        if server:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_token(server_bin, models, assets, shots):
    print('token')
    with tempfile.NamedTemporaryFile('w', prefix='token-', delete=False) as f:
        f.write('s3cret-web-token\n')
        token_file = f.name
    server = None
    driver = None
    try:
        server = Server(server_bin, models, assets, token_file)
        driver = start_browser()
        page = Page(driver, server.url, shots)
        page.open('')
        dialog = page.one('#token-dialog[open]', 'the token form')
        page.shot('token')
        page.one('#token-input').send_keys('wrong-token')
        page.one('#token-submit').click()
        page.one('#token-dialog[open]', 'the token form again after a wrong token')
        check('refused' in page.one('#token-reason').text, 'the form does not say the token was refused')
        page.one('#token-input').send_keys('s3cret-web-token')
        page.one('#token-submit').click()
        page.one('tr[data-checkpoint]', 'the checkpoint list once the token is given')
        page.no_error('browse with a token')
        # Kept for the tab: a new view asks nothing.
        page.open(f'?checkpoint={CHECKPOINT}')
        page.one('.tree-row[data-path="blk"]', 'the module tree with the kept token')
        check(not page.css('#token-dialog[open]'), 'the page asked for the token again in the same tab')
        del dialog
    finally:
        if driver:
            driver.quit()
        if server:
            server.stop()
        os.unlink(token_file)


# --- issue 31: absolute colour scales, lock scale, ticks, search, metadata ---

HEALTHY = 'model-q8_0.gguf'
PLANTED = 'planted-q8_0.gguf'
PLANTED_TENSOR = 'blk.0.attn_q.weight'  # [256, 256]
PLANTED_INDEX = (37, 100)


def alarm(rgb):
    """The scales' rule (client/web/scales.js): every colour of the calm
    part (0 up to the bound) has less red than green; every colour beyond
    the bound at least 40 more."""
    return rgb[0] - rgb[1] > 40


def plant(cli, src, dst, tensor, index, steps=80):
    """A copy of a Q8_0 GGUF with one code of `tensor` moved `steps` levels
    (towards 0's far side, so it stays in int8): an element `steps` steps
    beyond the rounding bound."""
    listed = json.loads(run_cli(cli, 'ls', src, '--filter', tensor).splitlines()[0])
    part = listed['parts'][0]
    check(part['dtype'] == 'Q8_0', f'{tensor} of {src} is {part["dtype"]}, not Q8_0')
    cols = int(listed['shape'][1])
    flat = index[0] * cols + index[1]
    at = int(part['offset']) + (flat // 32) * 34 + 2 + flat % 32  # f16 d, then 32 int8 codes
    shutil.copyfile(src, dst)
    with open(dst, 'r+b') as f:
        f.seek(at)
        q = int.from_bytes(f.read(1), 'little', signed=True)
        f.seek(at)
        f.write((q - steps if q >= 0 else q + steps).to_bytes(1, 'little', signed=True))


def canvas_pixels(page):
    """Every pixel of the heatmap canvas: (width, height, flat RGB list)."""
    return page.d.execute_script(
        "const c = document.querySelector('.heatmap-canvas'); const d = c.getContext('2d')"
        ".getImageData(0, 0, c.width, c.height).data; const out = new Array(c.width * c.height * 3);"
        "for (let i = 0, o = 0; i < d.length; i += 4) { out[o++] = d[i]; out[o++] = d[i + 1]; out[o++] = d[i + 2]; }"
        "return [c.width, c.height, out];")


def alarm_pixels(page):
    w, h, px = canvas_pixels(page)
    return w, h, [(k // w, k % w) for k in range(w * h) if alarm(px[3 * k:3 * k + 3])]


def error_heatmap(page, checkpoint, tensor, bound):
    """Opens the error heatmap against SOURCE and waits for it to be coloured
    on the tensor's own bound."""
    page.open(f'?checkpoint={checkpoint}&tensor={tensor}&view=heatmap&mode=error&ref={SOURCE}')
    heatmap_ready(page)
    page.wait(lambda: page.css(f'.colour-bar[data-scale="error"][data-bound="{bound!r}"]'),
              f'the error legend anchored at the tensor\'s bound {bound}')
    page.no_error(f'{checkpoint} error heatmap')


def tick_digits_ok(labels):
    """Tick labels print no more digits than their step needs: 0 as "0", no
    trailing zeros after the point, no digit below the step's last one."""
    values = [float(l.rstrip('%')) for l in labels]
    steps = [abs(b - a) for a, b in zip(values, values[1:]) if b != a]
    if not steps:
        return None
    step = min(steps)
    last = 10 ** math.floor(math.log10(step) + 1e-9)
    for label, v in zip(labels, values):
        text = label.rstrip('%')
        if v == 0 and text != '0':
            return f'{label!r} for 0'
        if 'e' not in text and '.' in text and text.endswith('0'):
            return f'{label!r} ends in a zero'
        if abs(v / last - round(v / last)) > 1e-6:
            return f'{label!r} has digits below the step {step}'
    return None


def write_gguf_with_arrays(path):
    """A one-tensor GGUF (v3, an F32 [4]) whose header holds a long string
    array and a short one, as a tokenizer's vocabulary sits in real files."""
    import struct

    def string(text):
        b = text.encode()
        return struct.pack('<Q', len(b)) + b

    tokens = [f'tok{k}' for k in range(300)]
    kvs = [
        string('general.architecture') + struct.pack('<I', 8) + string('llama'),
        string('tokenizer.ggml.tokens') + struct.pack('<IIQ', 9, 8, len(tokens)) + b''.join(string(t) for t in tokens),
        string('tokenizer.ggml.scores') + struct.pack('<IIQ', 9, 6, 3) + struct.pack('<3f', 0.0, -1.0, -2.0),
    ]
    head = b'GGUF' + struct.pack('<IQQ', 3, 1, len(kvs)) + b''.join(kvs)
    head += string('blk.0.attn_norm.weight') + struct.pack('<IQIQ', 1, 4, 0, 0)  # F32 [4] at 0
    head += b'\0' * (-len(head) % 32)
    with open(path, 'wb') as f:
        f.write(head + struct.pack('<4f', 1, 2, 3, 4))


def test_colours(driver, server_bin, cli, models, assets, shots):
    """Issue 31, point 1: the healthy Q8_0 demo is calm everywhere (tree by
    max error in steps and by SQNR, error heatmap), a planted element 80
    steps out is red on its cell alone; lock scale keeps the legend across a
    zoom; ticks print the digits their step needs; the search finds a tensor
    by a subsequence; the metadata panel shows the GGUF key/values; the
    colour bar is in view at 1600x1000."""
    print('issue 31: absolute colour scales')
    root = tempfile.mkdtemp(prefix='tm-web-colours-')
    server = None
    try:
        for name in (HEALTHY, SOURCE):
            shutil.copyfile(os.path.join(models, name), os.path.join(root, name))
        plant(cli, os.path.join(root, HEALTHY), os.path.join(root, PLANTED), PLANTED_TENSOR, PLANTED_INDEX)
        write_gguf_with_arrays(os.path.join(root, 'arrays.gguf'))
        diffs = {}
        for ckpt in (HEALTHY, PLANTED):
            out = run_cli(cli, 'diff', os.path.join(root, ckpt), os.path.join(root, SOURCE))
            diffs[ckpt] = {r['name']: r for r in (json.loads(l).get('tensor') for l in out.splitlines() if l.strip()) if r}
        check(all(float(r.get('maxExcessSteps', 0)) == 0 for r in diffs[HEALTHY].values()),
              f'the demo {HEALTHY} is not healthy: max_excess_steps {[r.get("maxExcessSteps") for r in diffs[HEALTHY].values()]}')
        planted = diffs[PLANTED][PLANTED_TENSOR]
        check(float(planted['maxExcessSteps']) > 70 and [int(x) for x in planted['worst'][0]['index']] == list(PLANTED_INDEX),
              f'the planted element is not the worst 80 steps out: {planted["maxExcessSteps"]} at {planted["worst"][0]["index"]}')
        server = Server(server_bin, root, assets)
        page = Page(driver, server.url, shots)

        print('  the healthy Q8_0: a calm tree')
        page.open(f'?checkpoint={HEALTHY}&view=diff&ref={SOURCE}')
        page.one('#diff-run').click()
        page.one('[data-field="worst_tensor"]', 'the diff summary')
        page.one('nav a[data-view="arch"]').click()
        for metric in ('max_err_steps', 'sqnr_db'):
            select = page.one('#arch-metric')
            page.wait(lambda: select.is_enabled(), 'the metric selector after the diff')
            select.find_element(By.CSS_SELECTOR, f'option[value="{metric}"]').click()
            page.wait(lambda: page.query().get('metric') == metric, f'metric={metric} in the URL')
            page.wait(lambda: len(page.css('.tree-row[data-leaf="true"] [data-field="metric"][style]')) == len(diffs[HEALTHY]),
                      f'every tensor coloured by {metric}')
            cells = page.d.execute_script(
                "return [...document.querySelectorAll('.tree-row [data-field=\"metric\"][style]')].map((e) =>"
                " [e.closest('.tree-row').dataset.path, getComputedStyle(e).backgroundColor]);")
            red = [(path, c) for path, c in cells if alarm([int(x) for x in RGB.match(c).groups()])]
            check(not red, f'{HEALTHY} coloured by {metric}: alarm colours where every tensor is within its bound: {red[:4]}')
            check(page.css('.legend .gradient-ticks, .legend .bands'), f'the {metric} legend has no numbers')
            page.shot(f'i31_architecture_{metric}', settle=0.1)

        print('  the healthy Q8_0: a calm error heatmap')
        bound = float(diffs[HEALTHY][PLANTED_TENSOR]['boundSteps'])
        error_heatmap(page, HEALTHY, PLANTED_TENSOR, bound)
        w, h, red = alarm_pixels(page)
        check(not red, f'{HEALTHY} {PLANTED_TENSOR}: {len(red)} of {w * h} heatmap pixels in alarm colours, e.g. {red[:3]}, '
              f'where the diff says max_excess_steps = 0')
        page.shot('i31_heatmap_error_healthy', settle=0.1)

        print('  the colour bar in view at 1600x1000')
        driver.set_window_size(1600, 1000)
        try:
            page.open(f'?checkpoint={HEALTHY}&tensor={PLANTED_TENSOR}&view=heatmap&mode=error&ref={SOURCE}')
            heatmap_ready(page)
            time.sleep(0.3)  # the resize settles
            where = page.d.execute_script(
                "const b = document.querySelector('.colour-bar .gradient-ticks').getBoundingClientRect();"
                "return [b.bottom, window.innerHeight, window.scrollY];")
            check(where[0] <= where[1] and where[2] == 0,
                  f'at 1600x1000 the colour bar ends at {where[0]:.0f} px, the window shows {where[1]} (scrolled {where[2]})')
            page.shot('i31_heatmap_1600x1000', settle=0.1)
        finally:
            driver.set_window_size(1480, 1100)

        print('  a planted element 80 steps out: red on its cell')
        bound = float(diffs[PLANTED][PLANTED_TENSOR]['boundSteps'])
        error_heatmap(page, PLANTED, PLANTED_TENSOR, bound)
        w, h, red = alarm_pixels(page)
        check(red, f'{PLANTED}: the element {PLANTED_INDEX} 80 steps out shows no alarm colour')
        rows = sorted({int(r * 256 / h) for r, _ in red})
        cols = sorted({int(c * 256 / w) for _, c in red})
        check(rows == [PLANTED_INDEX[0]] and cols == [PLANTED_INDEX[1]],
              f'{PLANTED}: alarm colours on elements rows {rows[:5]}, columns {cols[:5]}; only {PLANTED_INDEX} lies beyond its bound')
        r0, c0 = red[len(red) // 2]
        _, _, px = canvas_pixels(page)
        k = 3 * (r0 * w + c0)
        check(px[k] > 150 and px[k + 1] < 80, f'{PLANTED}: the 80-step cell is drawn {px[k:k + 3]}, not red')
        page.shot('i31_heatmap_error_planted', settle=0.1)
        # The inspector judges the element as the diff does, against its
        # group's own bound (at most the tensor's).
        click_element_cell(page, *PLANTED_INDEX, 256, 256)
        inspector_ready(page, list(PLANTED_INDEX))
        page.one('.inspector [data-field="error_steps"]', 'the error in steps of the planted element')
        note = page.fields().get('note:error_steps', '')
        shown = re.match(r'beyond its bound \(([0-9.e-]+) steps.*another level is nearer', note)
        check(shown and float(shown.group(1)) <= bound * (1 + 1e-4),
              f'the inspector says {note!r} of the planted element, the tensor\'s bound is {bound} steps')

        print('  the planted tensor is red in the tree, and its modules; the others calm')
        page.open(f'?checkpoint={PLANTED}&view=diff&ref={SOURCE}')
        page.one('#diff-run').click()
        page.one('[data-field="worst_tensor"]', 'the diff summary')
        page.one('nav a[data-view="arch"]').click()
        select = page.one('#arch-metric')
        page.wait(lambda: select.is_enabled(), 'the metric selector after the diff')
        select.find_element(By.CSS_SELECTOR, 'option[value="max_err_steps"]').click()
        page.wait(lambda: len(page.css('.tree-row[data-leaf="true"] [data-field="metric"][style]')) == len(diffs[PLANTED]),
                  'every tensor coloured')
        cells = dict(page.d.execute_script(
            "return [...document.querySelectorAll('.tree-row [data-field=\"metric\"][style]')].map((e) =>"
            " [e.closest('.tree-row').dataset.path, getComputedStyle(e).backgroundColor]);"))
        red = sorted(path for path, c in cells.items() if alarm([int(x) for x in RGB.match(c).groups()]))
        check(red == ['blk', 'blk.0', 'blk.0.attn_q', PLANTED_TENSOR],
              f'{PLANTED} by max error in steps: alarm colours on {red}; only {PLANTED_TENSOR} and its modules lie beyond')
        page.shot('i31_architecture_planted', settle=0.1)

        print('  lock scale keeps the legend across a zoom')
        page.open(f'?checkpoint={HEALTHY}&tensor={PLANTED_TENSOR}&view=heatmap')
        first = heatmap_ready(page)
        legend = lambda: (page.field('bar_min', '.colour-bar'), page.field('bar_max', '.colour-bar'),  # noqa: E731
                          [e.text for e in page.css('.colour-bar [data-tick]')])
        before = legend()
        problem = tick_digits_ok(before[2])
        check(problem is None, f'the value legend\'s ticks {before[2]}: {problem}')
        page.one('[data-role="lock-scale"]').click()
        page.wait(lambda: 'locked' in page.field('scale_state', '.colour-bar'), 'the legend to say the scale is locked')
        overlay = page.one('.heatmap-overlay')
        page.d.execute_script(
            "const o = arguments[0]; const r = o.getBoundingClientRect();"
            "for (let k = 0; k < 6; k++) o.dispatchEvent(new WheelEvent('wheel', {deltaY: -240, clientX: r.left + r.width * 0.2,"
            " clientY: r.top + r.height * 0.2, bubbles: true, cancelable: true}));", overlay)
        heatmap_ready(page, after=first)
        page.wait(lambda: page.query().get('region'), 'region= after zooming')
        after = legend()
        check(after == before, f'the locked legend changed across a zoom: {before} -> {after}')
        page.shot('i31_heatmap_locked_zoom', settle=0.1)

        print('  ticks print their step\'s digits')
        page.open(f'?checkpoint={HEALTHY}&tensor={PLANTED_TENSOR}&view=dist')
        page.one('svg[data-role="histogram"]', 'the histogram')
        labels = [e.text for e in page.css('svg[data-role="histogram"] .value-tick')]
        check(len(labels) >= 3, f'the histogram has ticks {labels}')
        problem = tick_digits_ok(labels)
        check(problem is None, f'the histogram\'s ticks {labels}: {problem}')

        print('  search and metadata')
        page.open(f'?checkpoint={HEALTHY}')
        box = page.one('#arch-search', 'the search box')
        box.send_keys('b0aq')
        hits = page.wait(lambda: [e.get_attribute('data-path') for e in page.css('.search-hit')] or None, 'search hits')
        check(hits[0] == PLANTED_TENSOR, f'searching "b0aq" ranks {hits} ({PLANTED_TENSOR} expected first)')
        page.shot('i31_search', settle=0.1)
        box.send_keys(Keys.ENTER)
        page.wait(lambda: page.query().get('tensor') == PLANTED_TENSOR, 'Enter to open the first hit')
        page.open(f'?checkpoint={HEALTHY}')
        panel = page.one('[data-role="metadata"]', 'the metadata panel')
        panel.find_element(By.TAG_NAME, 'summary').click()
        row = page.one('[data-role="metadata"] tr[data-key="general.architecture"]', 'general.architecture')
        check('"llama"' in row.text, f'general.architecture reads {row.text!r}')
        check(page.field('conventions', '[data-role="metadata"]') == 'ggml', 'the conventions are not ggml')
        page.shot('i31_metadata', settle=0.1)
        # Arrays fold: their type and length show, the items on request.
        page.open('?checkpoint=arrays.gguf')
        page.one('[data-role="metadata"] summary').click()
        row = page.one('[data-role="metadata"] tr[data-key="tokenizer.ggml.tokens"]', 'tokenizer.ggml.tokens')
        folded = row.find_elements(By.CSS_SELECTOR, 'details[data-folded]')
        check(folded and not folded[0].get_attribute('open') and '300 items' in folded[0].text,
              f'a 300-item array is not folded to its length: {row.text!r}')
        check(not folded[0].find_element(By.CSS_SELECTOR, '.folded-value').is_displayed(), 'the folded items show')
        short = page.one('[data-role="metadata"] tr[data-key="tokenizer.ggml.scores"]').text
        check('[0, -1, -2]' in short, f'a 3-item array does not show whole: {short!r}')
        folded[0].find_element(By.TAG_NAME, 'summary').click()
        check('"tok0"' in folded[0].find_element(By.CSS_SELECTOR, '.folded-value').text, 'unfolding shows no items')
        page.no_error('metadata with arrays')
        page.shot('i31_metadata_arrays', settle=0.1)
    finally:
        if server:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


# --- issue 30's formats: MLX, NVIDIA ModelOpt, bitsandbytes LLM.int8, HQQ ---

WRITERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'python', 'writers')

# (screenshot tag, checkpoint, tensor, the writer's expected values under
# the root, its source checkpoint, convention, parameters the Scalar
# Inspector shows with their labels, elements to inspect, how its groups
# index its scales or None). Those with a layout get the whole walk (tree,
# tensor, inspector, heatmaps, distribution, diff); the others the tensor
# view and the inspector.
MLX_AFFINE = {'scale': 'scale', 'bias': 'bias'}
HQQ = {'scale': 'scale', 'zero': 'zero'}
FORMAT_CASES = [
    ('mlx_affine', 'mlx/model', 'model.layers.0.self_attn.q_proj.weight', 'mlx/expected', 'mlx/source',
     'mlx', MLX_AFFINE, [(1, 70), (7, 127)], 'in'),
    ('mlx_nvfp4', 'mlx/model', 'model.layers.1.self_attn.v_proj.weight', 'mlx/expected', 'mlx/source',
     'mlx', {'scale_e4m3': 'scale code (E4M3)', 'scale': 'scale'}, [(1, 17), (4, 47)], None),
    # A stack of experts [2, 3, 192]: one slice of it on the heatmap.
    ('mlx_experts', 'mlx/model', 'model.layers.1.mlp.experts.weight', 'mlx/expected', 'mlx/source',
     'mlx', MLX_AFFINE, [(1, 2, 100), (1, 0, 191)], None),
    # [2, 15]: E2M1's 0.5, the level below it 0.
    ('nvfp4', 'nvfp4', 'model.layers.0.mlp.down_proj.weight', 'nvfp4/ref', 'nvfp4/source', 'modelopt',
     {'block_scale': 'block scale', 'global_scale': 'global scale', 'scale': 'scale'}, [(2, 15), (47, 100)], 'in'),
    ('mixed_precision_fp8', 'mixed_precision', 'model.layers.0.self_attn.q_proj.weight', 'mixed_precision/ref',
     'mixed_precision/source', 'modelopt', {'scale': 'scale'}, [(1, 7)], None),
    ('bnb_int8', 'bnb/model', 'model.layers.0.mlp.down_proj.weight', 'bnb/expected', 'bnb/source',
     'bitsandbytes', {'SCB': 'SCB (row absmax)'}, [(0, 3), (5, 39)], 'row'),
    ('hqq_4bit_g64', 'hqq_4bit_g64', 'model.layers.0.mlp.down_proj.weight', 'hqq_4bit_g64/ref',
     'hqq_4bit_g64/source', 'hqq', HQQ, [(1, 70), (47, 0)], None),
    # Axis 0: groups strided down the columns, checked against the inspector.
    ('hqq_axis0_bf16', 'hqq_axis0_bf16', 'model.layers.0.mlp.down_proj.weight', 'hqq_axis0_bf16/ref',
     'hqq_axis0_bf16/source', 'hqq', HQQ, [(1, 70), (63, 95)], 'inspect'),
]


def write_format_checkpoints(root):
    """The numpy writers of tests/python/writers, run as their tests run them."""
    for out, writer in (('mlx', 'mlx_writer.py'), ('bnb', 'bnb_int8_writer.py'), ('', 'modelopt.py'), ('', 'hqq.py')):
        r = subprocess.run([sys.executable, '-B', os.path.join(WRITERS, writer), os.path.join(root, out)],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f'{writer} exited {r.returncode}: {r.stderr.strip()[-2000:]}')


def f32_bits(x):
    import numpy as np
    return int(np.float32(x).view(np.uint32))


def page_fetch(page, method, body):
    """A POST to the page's own HTTP/JSON API, from inside the page."""
    reply = page.d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('v1/' + arguments[0], {method: 'POST', headers: {'Content-Type': 'application/json'},"
        " body: JSON.stringify(arguments[1])}).then((r) => r.json()).then(done)"
        ".catch((e) => done({error: String(e)}));", method, body)
    check('error' not in reply and 'code' not in reply, f'{method} from the page failed: {reply}')
    return reply


def no_undefined(page, selector, where):
    text = page.d.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText).join(' ');", selector)
    for bad in ('undefined', 'NaN', 'null', '[object Object]'):
        check(bad not in text, f'{where}: the page shows {bad!r}: {text[:400]!r}')


def legend_ramp(page):
    ramp = [tuple(int(c) for c in m) for m in RGB.findall(page.d.execute_script(
        "return getComputedStyle(document.querySelector('.colour-bar .gradient')).backgroundImage;"))]
    check(len(ramp) >= 2, f'no ramp colours in the legend gradient: {ramp}')

    def at(t):
        t = min(1.0, max(0.0, t)) * (len(ramp) - 1)
        i = min(len(ramp) - 2, int(t))
        f = t - i
        return tuple(a + (b - a) * f for a, b in zip(ramp[i], ramp[i + 1]))
    return at


def cell_colours(page, rows, cols):
    """The canvas colour at the middle of every cell, row-major."""
    return [tuple(p) for p in page.d.execute_script(
        "const [rows, cols] = [arguments[0], arguments[1]];"
        "const c = document.querySelector('.heatmap-canvas'); const d = c.getContext('2d')"
        ".getImageData(0, 0, c.width, c.height).data; const out = [];"
        "for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {"
        " const x = Math.floor((j + 0.5) * c.width / cols), y = Math.floor((i + 0.5) * c.height / rows);"
        " const o = 4 * (y * c.width + x); out.push([d[o], d[o + 1], d[o + 2]]); } return out;", rows, cols)]


def check_format_tree(page, ckpt, tensor, listed, tag):
    """The tree shows the weight as one leaf with the CLI's scheme (none of
    its stored parts as a leaf), its badge inside the scheme column."""
    page.open(f'?checkpoint={ckpt}')
    page.one('.tree-row[data-path]', 'the module tree')
    page.no_error(f'{ckpt} architecture')
    leaf = page.one(f'.tree-row[data-path="{tensor}"][data-leaf="true"]', f'the leaf {tensor}')
    badge = leaf.find_element(By.CSS_SELECTOR, '[data-field="scheme"]')
    scheme = listed['encoding']['scheme']
    check(badge.get_attribute('title') == scheme, f'{ckpt}: the tree calls {tensor} {badge.get_attribute("title")!r}, '
          f'tensormorph ls {scheme!r}')
    # The badge stays inside its column: a long scheme does not run over
    # the parameter count.
    over = page.d.execute_script(
        "const b = arguments[0]; const n = b.nextElementSibling;"
        "return b.getBoundingClientRect().right - n.getBoundingClientRect().left;", badge)
    check(over <= 0, f'{ckpt}: the scheme badge of {tensor} runs {over:.0f} px into the params column')
    leaves = [e.get_attribute('data-path') for e in page.css('.tree-row[data-leaf="true"]')]
    parts = [p['name'] for p in listed['parts'] if p['name'] != tensor]
    both = sorted(set(parts) & set(leaves))
    check(not both, f'{ckpt}: stored parts shown as tensors of their own: {both}')
    if tag in ('mlx_affine', 'nvfp4'):  # the mixed-bit tree, the long scheme names
        page.shot(f'i30_{tag}_architecture', settle=0.1)


def check_format_configs(page, cli, root, ckpt, tag):
    """The metadata panel shows the quantization config as the server
    parsed it (as `tensormorph info --json` reports it, quant_method first)
    and the config files flattened to dotted keys."""
    info = json.loads(run_cli(cli, 'info', os.path.join(root, ckpt)))
    want = [(f['key'], f['value']) for f in info['quantConfig']]
    check(want and want[0][0] == 'quant_method', f'{ckpt}: info lists no parsed config: {info.get("quantConfig")}')
    page.open(f'?checkpoint={ckpt}')
    page.one('[data-role="metadata"] summary', 'the metadata panel').click()
    rows = page.wait(lambda: page.d.execute_script(
        "return [...document.querySelectorAll('[data-role=\"quant-config\"] tbody tr')]"
        ".map((r) => [r.dataset.key, r.cells[1].innerText.trim()]);") or None, f'{ckpt}: the parsed config table')
    check([tuple(r) for r in rows] == want, f'{ckpt}: the page shows the config as {rows}, info as {want}')
    names = [f['name'] for f in info['configFiles']]
    shown = [e.get_attribute('data-config-file') for e in page.css('[data-role="configs"] [data-config-file]')]
    check(shown == names, f'{ckpt}: config files shown {shown}, info lists {names}')
    page.one('[data-config-file="config.json"] summary').click()
    keys = [e.get_attribute('data-key') for e in page.css('[data-config-file="config.json"] tr[data-key]')]
    check(any(k.startswith('quantization.') for k in keys), f'{ckpt}: config.json shows no quantization.* key: {keys[:20]}')
    page.no_error(f'{ckpt} configs')
    page.shot(f'i31_{tag}_configs', settle=0.1)


def check_format_tensor_view(page, ckpt, tensor, listed, convention, tag, tree):
    """The tensor view shows its scheme, convention, group size, stored
    parts and backend rows as `tensormorph ls` lists them."""
    if tree:
        check_format_tree(page, ckpt, tensor, listed, tag)
    page.open(f'?checkpoint={ckpt}&tensor={tensor}&view=tensor')
    page.one('.view-tensor [data-field="scheme"]', 'the tensor facts')
    e = listed['encoding']
    got = {f: page.field(f, '.view-tensor') for f in ('scheme', 'convention', 'granularity', 'shape')}
    want = {'scheme': e['scheme'], 'convention': convention, 'granularity': e['granularity'],
            'shape': '[' + ', '.join(listed['shape']) + ']'}
    check(got == want, f'{ckpt} {tensor}: the tensor view shows {got}, tensormorph ls {want}')
    if int(e['groupSize']):
        shown = page.field('group_size', '.view-tensor').replace(',', '')
        check(shown == e['groupSize'], f'{ckpt} {tensor}: group size {shown}, tensormorph ls {e["groupSize"]}')
    shown_parts = [r.get_attribute('data-part') for r in page.css('tr[data-part]')]
    check(shown_parts == [p['name'] for p in listed['parts']],
          f'{ckpt} {tensor}: stored parts {shown_parts}, tensormorph ls {[p["name"] for p in listed["parts"]]}')
    # Backend compatibility: the CLI's rows (MLX on Apple silicon; vLLM,
    # TensorRT-LLM and SGLang for ModelOpt; ...), each with its status.
    status = {'SUPPORT_STATUS_SUPPORTED': 'supported', 'SUPPORT_STATUS_NOT_SUPPORTED': 'not supported',
              'SUPPORT_STATUS_NOT_KNOWN': 'not known'}
    want = [[c['backend'], status[c['status']]] for c in listed.get('compat', [])]
    got = page.d.execute_script(
        "return [...document.querySelectorAll('tr[data-backend]')].map((r) =>"
        " [r.dataset.backend, r.querySelector('.status').innerText.trim()]);")
    check(want and got == want, f'{ckpt} {tensor}: backend rows {got}, tensormorph ls {want}')
    no_undefined(page, '.view-tensor', f'{ckpt} tensor view')
    page.no_error(f'{ckpt} tensor view')
    if tag in ('mlx_affine', 'nvfp4'):
        page.shot(f'i30_{tag}_tensor', settle=0.1)


def check_format_inspector(page, cli, root, ckpt, tensor, expected, labels, indices, tag):
    """Clicking a cell inspects it: the CLI's scalar fields, the format's
    parameters under their labels, and a value equal to the writer's
    expected value bit for bit."""
    import numpy as np
    shape = list(expected.shape)
    # A stack (MLX's experts): the slice of the first index's leading
    # coordinates, as the leading inputs pick it.
    lead = indices[0][:-2]
    page.open(f'?checkpoint={ckpt}&tensor={tensor}&view=heatmap'
              + (f'&leading={",".join(map(str, lead))}' if lead else ''))
    heatmap_ready(page)
    page.no_error(f'{ckpt} heatmap')
    for index in indices:
        check(index[:-2] == lead, f'{tensor}: inspect {index} within the slice {lead}')
        click_element_cell(page, index[-2], index[-1], shape[-2], shape[-1])
        inspector_ready(page, list(index))
        sc = compare_inspector(page, cli, root, tensor, list(index), checkpoint=ckpt)
        shown = page.field('value')
        check(f32_bits(float(shown)) == f32_bits(expected[index]),
              f'{ckpt} {tensor}{list(index)}: the inspector shows {shown}, the writer expects {expected[index]!r} '
              f'(bits {f32_bits(float(shown)):08x} vs {f32_bits(expected[index]):08x})')
        names = [p['name'] for p in sc.get('params', [])]
        check(sorted(names) == sorted(labels), f'{ckpt} {tensor}: parameters {names}, expected {sorted(labels)}')
        shown = page.fields()
        # The neighbouring levels, from the float32 value itself: where one
        # is 0 (E2M1's 0.5 next to 0) it reads 0.
        # On the group's end level there is none beyond, and the note says so.
        value = float(np.float32(float(sc['value'])))
        ends = {'step_below': float(np.float32(float(sc['rangeMin']))),
                'step_above': float(np.float32(float(sc['rangeMax'])))}
        for side, level in (('step_below', value - float(sc['stepBelow'])), ('step_above', value + float(sc['stepAbove']))):
            note = shown.get(f'note:{side}', '')
            if value == ends[side]:
                check(note.startswith('none: the '),
                      f'{ckpt} {tensor}{list(index)}: on an end level, {side} reads {note!r}')
                continue
            check(note.startswith('→ ') and abs(float(note[2:]) - level) <= 5e-5 * abs(level),
                  f'{ckpt} {tensor}{list(index)}: {side} leads to {note!r}, the level there is {level!r}')
        for name, label in labels.items():
            got = shown.get(f'label:param_{name}')
            check(got == label, f'{ckpt} {tensor}: parameter {name} is labelled {got!r}, expected {label!r}')
        if 'global_scale' in labels:
            # NVFP4: the element's scale is its block's E4M3 scale times the
            # per-tensor weight_scale_2, in float32 as the reference computes.
            p = {q['name']: float(q['value']) for q in sc['params']}
            check(np.float32(p['block_scale']) * np.float32(p['global_scale']) == np.float32(p['scale']),
                  f'{ckpt} {tensor}{list(index)}: scale {p["scale"]} is not block scale {p["block_scale"]} '
                  f'x global scale {p["global_scale"]}')
        no_undefined(page, '.inspector', f'{ckpt} inspector')
    page.no_error(f'{ckpt} inspector')
    page.shot(f'i30_{tag}_inspector', settle=0.1)


def check_format_heatmaps(page, cli, root, ckpt, tensor, expected, listed, layout, tag):
    """Group shading follows the groups the scales are stored for (the
    palette rule of README; each cell's group the index of its scale in the
    scales part, or the inspector's group); the absmax colours follow the
    decoded magnitudes on the legend's ramp."""
    import numpy as np
    rows, cols = expected.shape
    page.one('.segmented button[data-mode="group"]').click()
    page.wait(lambda: page.query().get('mode') == 'group', 'mode=group in the URL')
    heatmap_ready(page)
    page.no_error(f'{ckpt} group heatmap')
    cells = page.one('.heatmap').get_attribute('data-cells')
    check(cells == f'{rows}x{cols}', f'{ckpt} {tensor}: {cells} cells for [{rows}, {cols}] (one per element expected)')
    check_group_colours(page)
    reply = page_fetch(page, 'GetHeatmap', {'checkpoint': ckpt, 'tensor': tensor, 'mode': 'HEATMAP_MODE_GROUP',
                                            'width': cols, 'height': rows})
    groups = np.array([int(g) for g in reply['groups']]).reshape(rows, cols)
    r, c = np.indices((rows, cols))
    if layout != 'inspect':
        size = int(listed['encoding']['groupSize'])
        want = {'in': lambda: r * (cols // max(size, 1)) + c // max(size, 1), 'row': lambda: r,
                'tensor': lambda: np.zeros_like(r)}[layout]()
        bad = np.argwhere(groups != want)
        check(not len(bad), f'{ckpt} {tensor}: cell {bad[:1].tolist()} is group {groups[tuple(bad[0])] if len(bad) else 0}, '
              f'its scale is number {want[tuple(bad[0])] if len(bad) else 0} of the scales part')
    idx = [(0, 0), (rows // 2, cols // 2), (rows - 1, cols - 1), (1, cols - 1)]
    sc = json.loads(run_cli(cli, 'scalar', os.path.join(root, ckpt), tensor, *[f'{a},{b}' for a, b in idx]))['scalars']
    for (a, b), s in zip(idx, sc):
        check(groups[a, b] == int(s['group']), f'{ckpt} {tensor}[{a}, {b}]: the group heatmap says group {groups[a, b]}, '
              f'tensormorph scalar {s["group"]}')
    page.shot(f'i30_{tag}_group', settle=0.1)

    page.one('.segmented button[data-mode="absmax"]').click()
    page.wait(lambda: page.query().get('mode') == 'absmax', 'mode=absmax in the URL')
    heatmap_ready(page)
    page.no_error(f'{ckpt} absmax heatmap')
    mag = np.abs(expected.astype(np.float64))
    lo, hi = mag.min(), mag.max()
    at = legend_ramp(page)
    got = cell_colours(page, rows, cols)
    for k, colour in enumerate(got):
        want = at((mag.flat[k] - lo) / (hi - lo))
        check(all(abs(x - y) <= 1.5 for x, y in zip(colour, want)),
              f'{ckpt} {tensor}: absmax cell {divmod(k, cols)} (|value| {mag.flat[k]}) is drawn {colour}, '
              f'the legend ramp puts it at {tuple(round(x) for x in want)}')
    page.shot(f'i30_{tag}_absmax', settle=0.1)


def check_format_distribution(page, cli, root, ckpt, tensor, expected, tag):
    """The stats: the element count and extremes of the writer's values, the
    end levels as `tensormorph stats` counts them, the level usage."""
    page.open(f'?checkpoint={ckpt}&tensor={tensor}&view=dist')
    page.one('svg[data-role="histogram"]', 'the histogram')
    page.one('svg[data-role="code-usage"]', 'the level usage')
    page.no_error(f'{ckpt} distribution')
    shown = int(page.one('.facts [data-field="count"]').text.replace(',', ''))
    check(shown == expected.size, f'{ckpt} {tensor}: {shown} elements in the distribution, {expected.size} written')
    st = json.loads(run_cli(cli, 'stats', os.path.join(root, ckpt), tensor))
    check(float(st['min']) == float(expected.min()) and float(st['max']) == float(expected.max()),
          f'{ckpt} {tensor}: stats min/max {st["min"]}/{st["max"]}, the writer {expected.min()}/{expected.max()}')
    check_end_levels(page, cli, root, ckpt, tensor)
    no_undefined(page, '.facts dd, figcaption', f'{ckpt} distribution')
    page.shot(f'i30_{tag}_distribution', settle=0.1)


def check_format_diff(page, cli, root, ckpt, source, tag):
    """The diff view against the writer's source: a row per tensor the CLI
    reports, each with the CLI's max error in steps, SQNR and clipped count."""
    out = run_cli(cli, 'diff', os.path.join(root, ckpt), os.path.join(root, source))
    reports = {r['name']: r for r in (json.loads(l).get('tensor') for l in out.splitlines() if l.strip()) if r}
    page.open(f'?checkpoint={ckpt}&view=diff&ref={source}')
    page.one('#diff-run').click()
    page.one('[data-field="worst_tensor"]', 'the diff summary')
    page.wait(lambda: f'{len(reports)} of {len(reports)} tensors' in page.one('[data-field="progress"]').text,
              'the diff\'s progress to end')
    page.no_error(f'{ckpt} diff')
    # The table read in one call: {name: {column key: text}} and each row's
    # data-max-err-steps.
    rows = page.d.execute_script(
        "const keys = [...document.querySelectorAll('.diff-rows thead th')].map((h) => h.dataset.sort);"
        "const out = {}; for (const r of document.querySelectorAll('.diff-rows tr[data-name]')) {"
        " const range = document.createRange(); range.selectNodeContents(r.querySelector('td:nth-child(2)'));"
        " const lines = new Set([...range.getClientRects()].map((b) => Math.round(b.top)));"
        " const cells = {maxErrStepsAttr: r.dataset.maxErrSteps, schemeLines: lines.size};"
        " [...r.querySelectorAll('td')].forEach((td, i) => { cells[keys[i]] = td.innerText.trim(); });"
        " out[r.dataset.name] = cells; } return out;")
    check(set(rows) == set(reports), f'{ckpt}: the diff view shows {sorted(rows)}, tensormorph diff {sorted(reports)}')
    for name, r in reports.items():
        cells = rows[name]
        check(cells['schemeLines'] == 1, f'{ckpt} {name}: the scheme {cells["scheme"]!r} breaks over '
              f'{cells["schemeLines"]} lines')
        check(float(cells['maxErrStepsAttr']) == float(r['maxErrSteps']),
              f'{ckpt} {name}: max err {cells["maxErrStepsAttr"]} steps, CLI {r["maxErrSteps"]}')
        check(cells['clipped'].replace(',', '') == str(r.get('clipped', '0')),
              f'{ckpt} {name}: clipped {cells["clipped"]!r}, CLI {r.get("clipped")}')
        sqnr = float(r['sqnrDb'])
        shown = cells['sqnrDb']
        check((shown == '+inf' if sqnr == float('inf') else abs(float(shown) - sqnr) <= 5e-4 * max(1, abs(sqnr))),
              f'{ckpt} {name}: SQNR {shown!r}, CLI {r["sqnrDb"]}')
    no_undefined(page, '.diff-rows, .diff-summary', f'{ckpt} diff')
    page.shot(f'i30_{tag}_diff', settle=0.1)


def test_formats(driver, server_bin, cli, assets, shots):
    """Issue 30's formats, written by their numpy writers, through a live
    server: the tree, the tensor view, the Scalar Inspector (bit for bit as
    the writers' expected values), group and absmax heatmaps, the
    distribution and the diff against each writer's source."""
    import numpy as np
    print('issue 30 formats: MLX, ModelOpt, bitsandbytes LLM.int8, HQQ')
    root = tempfile.mkdtemp(prefix='tm-web-formats-')
    server = None
    try:
        write_format_checkpoints(root)
        server = Server(server_bin, root, assets)
        page = Page(driver, server.url, shots)
        for tag, ckpt, tensor, expected_dir, source, convention, labels, indices, layout in FORMAT_CASES:
            print(f'  {tag}: {ckpt} {tensor}')
            expected = np.load(os.path.join(root, expected_dir, tensor + '.npy'))
            listed = json.loads(run_cli(cli, 'ls', os.path.join(root, ckpt), '--filter', tensor).splitlines()[0])
            if tag == 'mlx_affine':
                check_format_configs(page, cli, root, ckpt, tag)
            check_format_tensor_view(page, ckpt, tensor, listed, convention, tag, tree=layout is not None)
            check_format_inspector(page, cli, root, ckpt, tensor, expected, labels, indices, tag)
            if layout is not None:
                check_format_heatmaps(page, cli, root, ckpt, tensor, expected, listed, layout, tag)
                check_format_distribution(page, cli, root, ckpt, tensor, expected, tag)
                check_format_diff(page, cli, root, ckpt, source, tag)
        # A layout bitsandbytes itself no longer loads: refused with its reason.
        page.open('?checkpoint=bnb/col32&tensor=model.layers.0.mlp.down_proj.weight&view=tensor')
        page.wait(lambda: page.banner(), 'the error banner for weight_format 1 (col32)')
        code = page.one('#banner [data-field="error_code"]').text
        message = page.one('#banner [data-field="error_message"]').text
        check(code == 'UNIMPLEMENTED' and 'weight_format' in message,
              f'bnb/col32: the page says {code}: {message!r}, expected UNIMPLEMENTED naming weight_format')
        page.shot('i30_bnb_col32_error', settle=0.1)
    finally:
        if server:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def run_formats_only(a):
    def body(started):
        started.driver = start_browser()
        test_formats(started.driver, a.tensormorphd, a.tensormorph, a.assets, a.screenshots)
        print('PASS: the web inspector agrees with the CLI on issue 30\'s formats')

    return run_test(body, a.screenshots, 'failure.png')


def run_browse_only(a):
    if not os.path.exists(os.path.join(a.models, CHECKPOINT)):
        subprocess.run([a.make_demo, a.models], check=True, stdout=subprocess.DEVNULL)

    def body(started):
        started.driver = start_browser()
        test_browse_mixed(started.driver, a.tensormorphd, os.path.abspath(a.models), a.assets, a.screenshots)
        print('PASS: browse lists a safetensors directory and what is beside it')

    return run_test(body, a.screenshots, 'failure.png')


def main():
    ap = demo_arguments(__doc__)
    ap.add_argument('--fixtures', help='the shared fixtures (default $TENSORMORPH_FIXTURES or ../shared/fixtures)')
    ap.add_argument('--only-formats', action='store_true', help='only the walk over issue 30\'s formats')
    ap.add_argument('--only-browse', action='store_true',
                    help='only the browse list of a safetensors directory with more beside it')
    a = ap.parse_args()
    os.makedirs(a.screenshots, exist_ok=True)
    if a.only_formats:
        return run_formats_only(a)
    if a.only_browse:
        return run_browse_only(a)
    if not have_demo(a, CHECKPOINT):
        return 1
    models = os.path.abspath(a.models)

    def body(started):
        started.server = Server(a.tensormorphd, models, a.assets)
        print(f'tensormorphd http on {started.server.url}')
        started.driver = start_browser()
        page = Page(started.driver, started.server.url, a.screenshots)
        test_walk_and_inspect(page, a.tensormorph, models)
        test_diff(page, a.tensormorph, models)
        test_distribution_link(page, a.tensormorph, models)
        test_distribution_codes(page, a.tensormorph, models)
        test_sparsity_and_errors(page)
        test_zoomed_click(page, a.tensormorph, models)
        started.server.stop()
        started.server = None
        test_colours(started.driver, a.tensormorphd, a.tensormorph, models, a.assets, a.screenshots)
        test_non_finite(started.driver, a.tensormorphd, fixtures_dir(a.fixtures), a.assets, a.screenshots)
        test_formats(started.driver, a.tensormorphd, a.tensormorph, a.assets, a.screenshots)
        test_browse_mixed(started.driver, a.tensormorphd, models, a.assets, a.screenshots)
        started.driver.quit()
        started.driver = None
        test_token(a.tensormorphd, models, a.assets, a.screenshots)
        print('PASS: the web inspector agrees with the CLI')

    return run_test(body, a.screenshots, 'failure.png')


if __name__ == '__main__':
    sys.exit(main())
