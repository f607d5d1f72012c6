#!/usr/bin/python3
"""Issue 31, point 5: 10,000 tensors in the web inspector (headless Chromium).

Usage:
  scale_test.py TENSORMORPHD TENSORMORPH MODELS SCREENSHOTS [--assets DIR]

Writes into MODELS (when missing) a 10,000-tensor llama-like GGUF pair, as
the GGUF definition lays it out (numpy): `scale-q8_0.gguf` (every 2-D weight
Q8_0: blocks of 32 codes with an f16 scale; the norms F32) and its float
source `scale-f32.gguf`, 1,111 layers of nine tensors and the embedding.
Some source values are exactly 0 (pruned) and some tiny ones round to 0
(induced), so the sparsity view has both. Then walks the page as a person
would: opens the architecture, Collapse all then Expand all, scrolls, types
a filter, switches to file order, runs the diff (10,000 rows streamed),
sorts by every column, switches the table to file order, filters
the rows, colours the tree by the diff, and counts the zeros of every tensor
(one ComputeSparsity call). For each interaction it collects the Long Tasks
API's entries (main-thread tasks over 50 ms) and prints its longest task and
their total; the target is no task over 100 ms (each interaction is said to
meet it or not). Asserted: what each interaction must show (row counts,
order, sort, filter, counts) and a generous bound of 1 s on any task, so the
test is not flaky on a loaded machine. Screenshots i31_scale_*.png.
"""

import argparse
import os
import struct
import sys
import time
import traceback

import numpy as np

import inspector_test as it
from inspector_test import Failure, check

QUANT = 'scale-q8_0.gguf'
SOURCE = 'scale-f32.gguf'
LAYERS = 1111
HIDDEN = 64
# Per layer: (GGUF name, shape in numpy order); 2-D ones are Q8_0.
LAYER_TENSORS = [
    ('attn_norm.weight', (HIDDEN,)),
    ('attn_q.weight', (4, HIDDEN)),
    ('attn_k.weight', (4, HIDDEN)),
    ('attn_v.weight', (4, HIDDEN)),
    ('attn_output.weight', (HIDDEN, 4 * 8)),
    ('ffn_norm.weight', (HIDDEN,)),
    ('ffn_gate.weight', (8, HIDDEN)),
    ('ffn_up.weight', (8, HIDDEN)),
    ('ffn_down.weight', (HIDDEN, 8 * 4)),
]
TENSORS = 1 + LAYERS * len(LAYER_TENSORS)  # 10,000
LONG_TASK_TARGET_MS = 100
LONG_TASK_BOUND_MS = 1000


def gguf_string(text):
    b = text.encode()
    return struct.pack('<Q', len(b)) + b


def quantize_q8_0(x):
    """Q8_0 as the format defines it: per 32 values d = absmax / 127 (stored
    f16) and codes round(x / d) in int8; 34 bytes a block."""
    blocks = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / 127).astype(np.float32)
    inv = np.where(d > 0, 1 / np.where(d > 0, d, 1), 0).astype(np.float32)
    q = np.clip(np.round(blocks * inv[:, None]), -127, 127).astype(np.int8)
    out = np.zeros((blocks.shape[0], 34), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def write_gguf(path, tensors, quantized):
    """A GGUF v3 of `tensors` [(name, float32 array)]: 2-D ones as Q8_0
    (type 8) when `quantized`, the rest F32 (type 0); data aligned to 32."""
    kvs = [gguf_string('general.architecture') + struct.pack('<I', 8) + gguf_string('llama'),
           gguf_string('general.name') + struct.pack('<I', 8) + gguf_string('scale test'),
           gguf_string('llama.block_count') + struct.pack('<II', 4, LAYERS)]
    infos, blobs, offset = [], [], 0
    for name, a in tensors:
        q8 = quantized and a.ndim == 2
        data = quantize_q8_0(a) if q8 else a.astype('<f4').tobytes()
        dims = list(reversed(a.shape))  # GGUF: the fastest dimension first
        infos.append(gguf_string(name) + struct.pack('<I', len(dims)) + struct.pack(f'<{len(dims)}Q', *dims)
                     + struct.pack('<IQ', 8 if q8 else 0, offset))
        pad = -len(data) % 32
        blobs.append(data + b'\0' * pad)
        offset += len(data) + pad
    head = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs)) + b''.join(kvs) + b''.join(infos)
    head += b'\0' * (-len(head) % 32)
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def source_tensors():
    """The float tensors, in model order (token_embd, then layer by layer)."""
    rng = np.random.default_rng(31)
    out = [('token_embd.weight', rng.standard_normal((16, HIDDEN)).astype(np.float32))]
    for i in range(LAYERS):
        for name, shape in LAYER_TENSORS:
            a = (1 + 0.1 * rng.standard_normal(shape)) if len(shape) == 1 else rng.standard_normal(shape)
            a = a.astype(np.float32)
            if len(shape) == 2:
                flat = a.reshape(-1)
                flat[rng.integers(0, flat.size, 2)] = 0       # pruned: 0 in the source
                flat[rng.integers(0, flat.size, 2)] = 1e-4    # induced: rounds to 0
            out.append((f'blk.{i}.{name}', a))
    return out


def ensure_checkpoints(models):
    os.makedirs(models, exist_ok=True)
    paths = [os.path.join(models, QUANT), os.path.join(models, SOURCE)]
    if all(os.path.exists(p) for p in paths):
        return
    t0 = time.time()
    tensors = source_tensors()
    check(len(tensors) == TENSORS, f'{len(tensors)} tensors written, meant {TENSORS}')
    write_gguf(paths[1], tensors, quantized=False)
    write_gguf(paths[0], tensors, quantized=True)
    print(f'  wrote {QUANT} and {SOURCE} ({TENSORS} tensors each) in {time.time() - t0:.1f} s')


OBSERVER = """
window.__longTasks = [];
try {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__longTasks.push([e.startTime, e.duration]);
  }).observe({ type: 'longtask', buffered: true });
} catch (e) { window.__longTasksError = String(e); }
"""


class Meter:
    """Long tasks per interaction: each interaction starts a window at
    performance.now() and, once done and idle, takes the tasks that began
    in it."""

    def __init__(self, page):
        self.page = page
        self.results = []
        page.d.execute_cdp_cmd('Page.addScriptToEvaluateOnNewDocument', {'source': OBSERVER})

    def start(self):
        return self.page.d.execute_script('return performance.now()')

    def stop(self, name, t0, settle=0.4):
        time.sleep(settle)  # let the tasks the interaction set off end
        tasks = self.page.d.execute_script(
            'return (window.__longTasks || []).filter((t) => t[0] >= arguments[0]).map((t) => t[1]);', t0)
        longest = max(tasks) if tasks else 0.0
        self.results.append((name, longest, sum(tasks), len(tasks)))
        print(f'  {name:<42} longest task {longest:7.1f} ms, total {sum(tasks):7.1f} ms in {len(tasks)} tasks'
              f'  {"meets" if longest <= LONG_TASK_TARGET_MS else "MISSES"} the 100 ms target')
        return longest

    def report(self):
        meet = [n for n, l, _, _ in self.results if l <= LONG_TASK_TARGET_MS]
        miss = [f'{n} ({l:.0f} ms)' for n, l, _, _ in self.results if l > LONG_TASK_TARGET_MS]
        print(f'long tasks: {len(meet)} of {len(self.results)} interactions within {LONG_TASK_TARGET_MS} ms'
              + (f'; over it: {", ".join(miss)}' if miss else ''))
        worst = max(self.results, key=lambda r: r[1])
        check(worst[1] <= LONG_TASK_BOUND_MS,
              f'{worst[0]} blocked the page for {worst[1]:.0f} ms, beyond the {LONG_TASK_BOUND_MS} ms bound')


def tree_paths(page):
    """The tree rows in the DOM, top to bottom, read in one call."""
    return page.d.execute_script(
        "return [...document.querySelectorAll('.tree-body .tree-row')].map((e) => e.dataset.path);")


def dom_rows(page, selector):
    return page.d.execute_script('return document.querySelectorAll(arguments[0]).length', selector)


def run(args):
    ensure_checkpoints(args.models)
    server = it.Server(args.tensormorphd, args.models, args.assets)
    driver = None
    try:
        driver = it.start_browser()
        page = it.Page(driver, server.url, args.screenshots)
        m = Meter(page)

        print('architecture of 10,000 tensors')
        page.open(f'?checkpoint={QUANT}&view=arch')
        t0 = m.start()
        page.one('.tree-row[data-path="blk"]', 'the module tree')
        m.stop('open the architecture', t0)

        body = page.one('.tree-body')
        t0 = m.start()
        page.one('#arch-collapse').click()
        page.wait(lambda: body.get_attribute('data-rows') == '2', 'the two top-level modules after Collapse all')
        m.stop('Collapse all', t0)
        t0 = m.start()
        page.one('#arch-expand').click()
        page.wait(lambda: int(body.get_attribute('data-rows') or 0) > TENSORS, 'every node listed after Expand all')
        m.stop('Expand all', t0)
        rows = int(body.get_attribute('data-rows'))
        drawn = dom_rows(page, '.tree-body .tree-row')
        check(drawn < 300, f'Expand all put {drawn} of {rows} tree rows in the DOM (virtual: a screenful)')
        print(f'  {rows} nodes listed, {drawn} in the DOM')
        t0 = m.start()
        page.d.execute_script('arguments[0].scrollTop = arguments[0].scrollHeight / 2', body)
        page.wait(lambda: page.css('.tree-body .tree-row[data-path^="blk.55"]'), 'the middle of the tree after scrolling')
        m.stop('scroll the tree to its middle', t0)
        page.shot('i31_scale_architecture')

        t0 = m.start()
        page.one('#arch-filter').send_keys('blk.1000.')
        page.wait(lambda: page.one('.tree').get_attribute('data-filter') == 'blk.1000.', 'the tree filtered')
        m.stop('type a filter in the tree', t0)
        paths = tree_paths(page)
        want = ['blk', 'blk.1000'] + [p for n, _ in sorted(LAYER_TENSORS)
                                      for p in (f'blk.1000.{n[:-len(".weight")]}', f'blk.1000.{n}')]
        check(paths[:2] == want[:2] and sorted(paths) == sorted(want),
              f'the filter blk.1000. shows {paths[:12]}, expected {want[:4]}...')
        page.one('#arch-filter').clear()
        page.d.execute_script("const f = document.getElementById('arch-filter'); f.value = '';"
                              " f.dispatchEvent(new Event('input'));")

        t0 = m.start()
        page.d.execute_script("const s = document.getElementById('arch-order'); s.value = 'file';"
                              " s.dispatchEvent(new Event('change'));")
        page.wait(lambda: page.one('.tree').get_attribute('data-order') == 'file', 'file order')
        page.wait(lambda: tree_paths(page)[:1] and tree_paths(page)[0].startswith('token_embd'), 'token_embd first in file order (it is stored first)')
        m.stop('switch to file order', t0)
        page.d.execute_script("const s = document.getElementById('arch-order'); s.value = 'model';"
                              " s.dispatchEvent(new Event('change'));")

        print('diff of 10,000 tensors')
        page.open(f'?checkpoint={QUANT}&view=diff&ref={SOURCE}')
        page.one('#diff-run')
        t0 = m.start()
        page.one('#diff-run').click()
        page.one('[data-field="worst_tensor"]', 'the diff summary')
        grid = page.one('.diff-rows .table-wrap')
        page.wait(lambda: int(grid.get_attribute('data-rows') or 0) >= TENSORS - 1, 'every diff row')
        m.stop('run the diff (rows streamed in)', t0, settle=0.8)
        rows = int(grid.get_attribute('data-rows'))
        drawn = dom_rows(page, '.diff-rows tr[data-name]')
        check(drawn < 300, f'the diff table holds {drawn} of {rows} rows in the DOM')
        print(f'  {rows} rows, {drawn} in the DOM')
        page.shot('i31_scale_diff')
        keys = page.d.execute_script("return [...document.querySelectorAll('.diff-rows thead th')].map((h) => h.dataset.sort);")
        for k in keys:
            for turn in range(2):
                before = grid.get_attribute('data-sort-dir') if grid.get_attribute('data-sort-key') == k else None
                t0 = m.start()
                page.one(f'.diff-rows thead th[data-sort="{k}"]').click()
                page.wait(lambda: grid.get_attribute('data-sort-key') == k and grid.get_attribute('data-sort-dir') != before,
                          f'the table sorted by {k}')
                m.stop(f'sort by {k} ({grid.get_attribute("data-sort-dir")})', t0, settle=0.2)
                if turn == 0 and before is None and k in ('maxErrSteps', 'sqnrDb', 'cosine'):
                    # A metric's first click puts the worst tensors first.
                    want = 'asc' if k in ('sqnrDb', 'cosine') else 'desc'
                    check(grid.get_attribute('data-sort-dir') == want,
                          f'the first sort by {k} is {grid.get_attribute("data-sort-dir")}, the worst first is {want}')
        # Model order puts blk.2 before blk.10 (as text it would not).
        page.one('.diff-rows thead th[data-sort="name"]').click()
        page.wait(lambda: grid.get_attribute('data-sort-key') == 'name' and grid.get_attribute('data-sort-dir') == 'asc', 'by name, ascending')
        page.d.execute_script('arguments[0].scrollTop = 0', grid)
        time.sleep(0.2)
        names = page.d.execute_script(
            "return [...document.querySelectorAll('.diff-rows tr[data-name]')].map((e) => e.dataset.name);")[:12]
        check(names[:3] == ['blk.0.attn_k.weight', 'blk.0.attn_norm.weight', 'blk.0.attn_output.weight']
              and all(n.startswith('blk.0.') or n.startswith('blk.1.') for n in names[:10]),
              f'model order by name starts {names[:5]}')
        # File order: as stored (the embedding first, then each layer as written).
        t0 = m.start()
        page.d.execute_script("const s = document.getElementById('diff-order'); s.value = 'file';"
                              " s.dispatchEvent(new Event('change'));")
        stored = ['token_embd.weight'] + [f'blk.0.{n}' for n, _ in LAYER_TENSORS]
        page.wait(lambda: page.d.execute_script(
            "return [...document.querySelectorAll('.diff-rows tr[data-name]')].map((e) => e.dataset.name);")[:10] == stored,
            f'the diff rows in file order ({stored[:3]}...)')
        m.stop('switch the diff table to file order', t0)
        t0 = m.start()
        page.one('#diff-row-filter').send_keys('ffn_down')
        page.wait(lambda: grid.get_attribute('data-shown') == str(LAYERS), f'{LAYERS} ffn_down rows')
        m.stop('type a filter in the diff table', t0)
        page.shot('i31_scale_diff_filtered')

        # The diff lives in the tab: to the architecture by its tab, not a reload.
        page.one('nav a[data-view="arch"]').click()
        select = page.one('#arch-metric')
        page.wait(lambda: select.is_enabled(), 'the metric selector after the diff')
        t0 = m.start()
        page.d.execute_script("const s = document.getElementById('arch-metric'); s.value = 'max_err_steps';"
                              " s.dispatchEvent(new Event('change'));")
        page.one('.tree-row[data-path="blk"] [data-field="metric"][style]', 'the tree coloured by the diff')
        m.stop('colour the tree by the diff', t0)
        page.shot('i31_scale_architecture_coloured')

        print('sparsity of 10,000 tensors, one server pass')
        page.open(f'?checkpoint={QUANT}&view=sparsity&ref={SOURCE}')
        t0 = m.start()
        page.one('#sparsity-run').click()
        status = page.one('[data-field="sparsity_status"]')
        page.wait(lambda: status.get_attribute('data-state') == 'done', 'every tensor counted', timeout=120)
        m.stop('count the zeros of every tensor', t0, settle=0.6)
        print(f'  {status.text}')
        wrap = page.one('.view-sparsity .table-wrap')
        check(wrap.get_attribute('data-rows') == str(TENSORS), f'sparsity rows {wrap.get_attribute("data-rows")}, expected {TENSORS}')
        top = page.css('.view-sparsity tr[data-name]')[0]
        cells = [td.text for td in top.find_elements(it.By.CSS_SELECTOR, 'td')]
        check(cells[0] != '' and cells[5] not in ('—', '0'), f'the top row by induced zeros shows none: {cells}')
        t0 = m.start()
        page.one('#sparsity-filter').send_keys('blk.7.')
        page.wait(lambda: wrap.get_attribute('data-shown') == str(len(LAYER_TENSORS)), 'the rows of blk.7')
        m.stop('type a filter in the sparsity table', t0)
        page.shot('i31_scale_sparsity')
        page.no_error('sparsity')
        m.report()
    finally:
        if driver:
            driver.quit()
        server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('tensormorphd')
    ap.add_argument('tensormorph')
    ap.add_argument('models')
    ap.add_argument('screenshots')
    ap.add_argument('--assets')
    args = ap.parse_args()
    os.makedirs(args.screenshots, exist_ok=True)
    t0 = time.time()
    try:
        run(args)
    except Failure as e:
        print(f'FAIL: {e}', file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    print(f'scale_test: OK in {time.time() - t0:.1f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
