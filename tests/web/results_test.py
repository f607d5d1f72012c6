#!/usr/bin/python3
"""Issue 31, point 4: a diff's results outlive the tab (headless Chromium).

Usage:
  results_test.py TENSORMORPHD TENSORMORPH MODELS SCREENSHOTS
                  [--make-demo TENSORMORPH_MAKE_DEMO] [--assets DIR]

Runs the diff of the demo in the page, then reloads it: the tree's colours
(computed, per leaf) and the diff table's rows are those before the reload,
restored from the server's kept report (GetDiffReport), not from a new run;
a fresh tab with the shared link (ref= and metric=) colours the tree the
same. The "Download JSON lines" button's tensor lines equal the tensors of
`tensormorph --json diff`. Then a diff of big tensors (their bytes holes in
sparse files, so each takes a while) is cancelled after its first row: the
page says cancelled, never done, the tree's legend marks the colouring as
partial, and after a reload the server's kept report says cancelled too.
Screenshots i31_results_*.png under SCREENSHOTS. MODELS holds the demo
(written there with --make-demo when missing).
"""

import json
import os
import shutil
import struct
import sys
import tempfile
import time

import inspector_test as it
from selenium.webdriver.common.by import By

CHECKPOINT = it.CHECKPOINT
SOURCE = it.SOURCE
SLOW_TENSORS = 32
SLOW_SIDE = 4096


def write_sparse_safetensors(path, header, data_bytes):
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)))
        f.write(text)
        f.truncate(8 + len(text) + data_bytes)


def write_slow_diff(root):
    """A compressed-tensors int8 checkpoint and its BF16 source, every byte
    a hole: SLOW_TENSORS tensors of SLOW_SIDE^2 elements, long enough to
    diff that a cancel after the first row always finds work left."""
    n = SLOW_SIDE * SLOW_SIDE
    q, s = {}, {}
    qo = so = 0
    for i in range(SLOW_TENSORS):
        name = f'model.layers.{i}.mlp.down_proj.weight'
        q[name] = {'dtype': 'I8', 'shape': [SLOW_SIDE, SLOW_SIDE], 'data_offsets': [qo, qo + n]}
        qo += n
        q[name + '_scale'] = {'dtype': 'BF16', 'shape': [SLOW_SIDE, 1], 'data_offsets': [qo, qo + 2 * SLOW_SIDE]}
        qo += 2 * SLOW_SIDE
        s[name] = {'dtype': 'BF16', 'shape': [SLOW_SIDE, SLOW_SIDE], 'data_offsets': [so, so + 2 * n]}
        so += 2 * n
    for d in ('slowq', 'slows'):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    write_sparse_safetensors(os.path.join(root, 'slowq', 'model.safetensors'), q, qo)
    write_sparse_safetensors(os.path.join(root, 'slows', 'model.safetensors'), s, so)
    with open(os.path.join(root, 'slowq', 'config.json'), 'w') as f:
        json.dump({'model_type': 'llama', 'quantization_config': {
            'quant_method': 'compressed-tensors', 'format': 'int-quantized',
            'quantization_status': 'compressed',
            'config_groups': {'group_0': {'targets': ['Linear'], 'weights': {
                'num_bits': 8, 'type': 'int', 'symmetric': True, 'strategy': 'channel',
                'group_size': None, 'block_structure': None, 'dynamic': False}}}}}, f)


def leaf_colours(page):
    """path -> computed background colour of each coloured leaf's metric cell."""
    return page.d.execute_script(
        "const out = {}; for (const e of document.querySelectorAll("
        "'.tree-row[data-leaf=\"true\"] [data-field=\"metric\"][style]')) {"
        " out[e.closest('.tree-row').dataset.path] = getComputedStyle(e).backgroundColor; } return out;")


def table_rows(page):
    return page.d.execute_script(
        "return [...document.querySelectorAll('.diff-rows tr[data-name]')]"
        ".map((r) => [r.dataset.name, r.dataset.maxErrSteps]);")


def progress_state(page):
    e = page.css('[data-field="progress"]')
    return (e[0].get_attribute('data-state'), e[0].text) if e else (None, '')


def rpc_calls(page):
    """The API methods this page load has called (its resource timings)."""
    return page.d.execute_script(
        "return performance.getEntriesByType('resource').map((e) => e.name)"
        ".filter((n) => n.includes('/v1/')).map((n) => n.split('/v1/')[1].split('?')[0]);")


def pick_metric(page, metric):
    select = page.one('#arch-metric')
    page.wait(lambda: select.is_enabled(), 'the metric selector after the diff')
    select.find_element(By.CSS_SELECTOR, f'option[value="{metric}"]').click()
    page.wait(lambda: page.query().get('metric') == metric, f'metric={metric} in the URL')


def wait_colours(page, count, what):
    return page.wait(lambda: (lambda c: c if len(c) == count else None)(leaf_colours(page)), what)


def downloaded_lines(page):
    """What "Download JSON lines" saves: the blob it hands the browser."""
    text = page.d.execute_async_script(
        "const done = arguments[arguments.length - 1]; const orig = URL.createObjectURL;"
        "URL.createObjectURL = (b) => { URL.createObjectURL = orig; b.text().then(done); return orig.call(URL, b); };"
        "document.querySelector('#diff-download').click();")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_reload_and_link(page, cli, root):
    print('results: a diff, then a reload')
    out = it.run_cli(cli, 'diff', os.path.join(root, CHECKPOINT), os.path.join(root, SOURCE))
    cli_tensors = {r['name']: r for r in (json.loads(l).get('tensor') for l in out.splitlines() if l.strip()) if r}
    it.check(cli_tensors, 'tensormorph --json diff reported no tensor')

    page.open(f'?checkpoint={CHECKPOINT}&view=diff&ref={SOURCE}')
    page.one('#diff-run').click()
    page.one('[data-field="worst_tensor"]', 'the diff summary')
    page.wait(lambda: progress_state(page)[0] == 'complete', 'the diff to complete')
    rows = table_rows(page)
    it.check(len(rows) == len(cli_tensors), f'{len(rows)} rows, the CLI {len(cli_tensors)} tensors')
    page.one('nav a[data-view="arch"]').click()
    pick_metric(page, 'max_err_steps')
    before = wait_colours(page, len(cli_tensors), 'every leaf coloured after the diff')
    page.shot('i31_results_arch_before')

    t0 = time.time()
    page.d.refresh()
    after = wait_colours(page, len(cli_tensors), 'the colours restored after a reload')
    print(f'  colours restored {time.time() - t0:.2f} s after the reload')
    it.check(after == before, f'the reload changed the colours: {before} -> {after}')
    it.check(not page.css('[data-field="diff-state"]'), 'a complete diff is marked partial on the legend')
    calls = rpc_calls(page)
    it.check('GetDiffReport' in calls and 'QuantDiff' not in calls,
             f'the reload did not restore from the kept report without a diff: it called {calls}')
    page.no_error('architecture after a reload')
    page.shot('i31_results_arch_reloaded')

    page.one('nav a[data-view="diff"]').click()
    page.wait(lambda: len(table_rows(page)) == len(rows), 'the diff table restored')
    it.check(table_rows(page) == rows, f'the restored table differs: {rows} -> {table_rows(page)}')
    state, text = progress_state(page)
    it.check(state == 'complete' and 'restored from the server' in text,
             f'the restored diff says {state!r}: {text!r}')
    page.shot('i31_results_diff_reloaded')

    print('  the download: the CLI\'s tensor lines')
    lines = downloaded_lines(page)
    got = {l['tensor']['name']: l['tensor'] for l in lines if 'tensor' in l}
    it.check(set(got) == set(cli_tensors), f'downloaded tensors {sorted(got)}, the CLI {sorted(cli_tensors)}')
    for name, r in cli_tensors.items():
        it.check(got[name] == r, f'{name}: the download says {got[name]}, the CLI {r}')
    it.check(sum(1 for l in lines if 'summary' in l) == 1 and 'summary' in lines[-1],
             'the download does not end with one summary line')

    print('  a fresh tab with the shared link')
    link = f'{page.base}?checkpoint={CHECKPOINT}&view=arch&ref={SOURCE}&metric=max_err_steps'
    first = page.d.current_window_handle
    page.d.switch_to.new_window('tab')
    try:
        page.d.get(link)
        shared = wait_colours(page, len(cli_tensors), 'the shared link\'s colours')
        it.check('QuantDiff' not in rpc_calls(page), 'the shared link ran the diff again')
        it.check(shared == before, f'the shared link colours differ: {before} -> {shared}')
        page.no_error('shared link')
        page.shot('i31_results_shared_link')
    finally:
        page.d.close()
        page.d.switch_to.window(first)


def test_cancel(page):
    print('results: a cancelled diff is marked so, here and after a reload')
    page.open('?checkpoint=slowq&view=diff&ref=slows')
    page.one('#diff-run').click()
    page.one('.diff-rows tr[data-name]', 'the first row of the slow diff')
    page.one('#diff-cancel').click()
    page.wait(lambda: progress_state(page)[0] == 'cancelled', 'the page to say cancelled')
    state, text = progress_state(page)
    rows = len(table_rows(page))
    it.check('cancelled' in text and 'done' not in text, f'the status line after a cancel: {text!r}')
    it.check(0 < rows < SLOW_TENSORS, f'{rows} rows of {SLOW_TENSORS} after the cancel')
    it.check(page.css('#diff-download') and page.one('#diff-download').is_displayed(), 'no download after a cancel')
    page.no_error('cancelled diff')
    page.shot('i31_results_cancelled')

    page.one('nav a[data-view="arch"]').click()
    pick_metric(page, 'max_err_steps')
    note = page.one('[data-field="diff-state"][data-state="cancelled"]', 'the legend\'s cancelled mark')
    it.check('cancelled' in note.text, f'the legend says {note.text!r}')
    it.check(page.css('.tree.partial-diff'), 'the tree of a cancelled diff is not marked partial')
    page.shot('i31_results_cancelled_arch')

    # The server ends the call once its running tensors stop; its kept
    # report then says cancelled.
    deadline = time.time() + 20
    while True:
        page.d.refresh()
        try:
            page.wait(lambda: page.css('[data-field="diff-state"]'), 'the restored mark', timeout=3)
            break
        except it.Failure:
            if time.time() > deadline:
                raise
    note = page.one('[data-field="diff-state"]')
    it.check(note.get_attribute('data-state') == 'cancelled', f'after a reload the legend says {note.text!r}')
    it.check('(cancelled)' in page.one('[data-field="diff-source"]').text, 'the tree\'s diff line does not say cancelled')
    page.one('nav a[data-view="diff"]').click()
    page.wait(lambda: progress_state(page)[0] == 'cancelled', 'the restored diff view to say cancelled')
    state, text = progress_state(page)
    it.check('restored from the server' in text and 'done' not in text, f'restored cancelled diff says {text!r}')
    page.no_error('restored cancelled diff')
    page.shot('i31_results_cancelled_restored')


def main():
    a = it.demo_arguments(__doc__).parse_args()
    os.makedirs(a.screenshots, exist_ok=True)
    if not it.have_demo(a, CHECKPOINT):
        return 1
    start = time.time()

    def body(started):
        root = tempfile.mkdtemp(prefix='tm-web-results-')
        started.cleanups.append(lambda: shutil.rmtree(root, ignore_errors=True))
        for name in (CHECKPOINT, SOURCE):
            shutil.copyfile(os.path.join(a.models, name), os.path.join(root, name))
        write_slow_diff(root)
        started.server = it.Server(a.tensormorphd, root, a.assets)
        started.driver = it.start_browser()
        page = it.Page(started.driver, started.server.url, a.screenshots)
        test_reload_and_link(page, a.tensormorph, root)
        test_cancel(page)
        print(f'PASS: diff results survive a reload and a shared link ({time.time() - start:.1f} s)')

    return it.run_test(body, a.screenshots, 'i31_results_failure.png')


if __name__ == '__main__':
    sys.exit(main())
