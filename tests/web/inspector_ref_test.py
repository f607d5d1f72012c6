#!/usr/bin/python3
"""The Scalar Inspector and the distribution against a GGUF's Hugging Face
source, in a real browser (issue 31, point 6).

Usage:
  inspector_ref_test.py TENSORMORPHD TENSORMORPH MODELS SCREENSHOTS
                        [--make-demo TENSORMORPH_MAKE_DEMO] [--assets DIR]

On the demo's Q8_0 GGUF (llama.cpp's names, Q/K rows permuted for RoPE as
llama.cpp's converter permutes them) against its BF16 Hugging Face source
(source/model.safetensors):
 - the inspector's source value of attn_q/attn_k elements equals the HF
   tensor's element through the converter's row map, read here with numpy
   from the safetensors file (the map written again from the converter's
   rule, not taken from the server), and names that element; other tensors
   pair element for element; a click on a heatmap cell shows the same;
 - `tensormorph --json scalar --ref` agrees with the page field for field
   (source value, index, signed error, error in steps);
 - a source that cannot be paired is said in the source panel (its status
   code), and the element is still inspected;
 - the distribution with a source draws the source's histogram over the same
   bins (numpy bins the HF tensor's values alike and gets the same counts),
   and its worst groups link to their group's distribution, which draws the
   group's source histogram too; so do the worst groups the diff lists
   beside a tensor's error heatmap.
Screenshots i31_inspector_*.png. Exits non-zero naming what differed.
"""

import json
import os
import sys
import time

import numpy as np

import inspector_test as it
from inspector_test import check

CHECKPOINT = 'model-q8_0.gguf'
SOURCE = 'source'
HEADS = 4  # the demo's llama.attention.head_count


def read_safetensors(path, name):
    """One tensor of a safetensors file as float32 (BF16, F16 or F32)."""
    with open(path, 'rb') as f:
        n = int.from_bytes(f.read(8), 'little')
        header = json.loads(f.read(n))
        meta = header[name]
        begin, end = meta['data_offsets']
        f.seek(8 + n + begin)
        raw = f.read(end - begin)
    dtype = meta['dtype']
    if dtype == 'BF16':
        values = (np.frombuffer(raw, dtype='<u2').astype(np.uint32) << 16).view(np.float32)
    elif dtype == 'F16':
        values = np.frombuffer(raw, dtype='<f2').astype(np.float32)
    else:
        check(dtype == 'F32', f'{name}: dtype {dtype} not read here')
        values = np.frombuffer(raw, dtype='<f4')
    return values.reshape(meta['shape'])


def hf_row(gguf_row, rows):
    """llama.cpp's converter writes, within each head of hd rows, HF row
    half * hd/2 + i as GGUF row 2i + half."""
    hd = rows // HEADS
    head, within = divmod(gguf_row, hd)
    return head * hd + (within % 2) * (hd // 2) + within // 2


def source_panel(page, index):
    it.inspector_ready(page, index)
    page.wait(lambda: page.css('.inspector .source-panel[data-state]'), 'the source panel')
    return page.fields()


def check_element(page, cli, models, tensor, hf_name, index, hf, mapped):
    """The inspector at `index` against the HF tensor `hf` and the CLI."""
    f = source_panel(page, index)
    row, col = index
    want_row = hf_row(row, hf.shape[0]) if mapped else row
    where = f'{tensor}{index}'
    check('source' in f, f'{where}: the inspector shows no source value ({f.get("source_error", "")})')
    check(float(f['source']) == float(hf[want_row, col]),
          f'{where}: source {f["source"]} in the inspector, {hf[want_row, col]!r} at {hf_name}[{want_row}, {col}] '
          f'in the safetensors file')
    check(f['source_index'] == f'{hf_name}[{want_row}, {col}]',
          f'{where}: the inspector names the source element {f["source_index"]!r}, '
          f'expected {hf_name}[{want_row}, {col}]')
    out = json.loads(it.run_cli(cli, 'scalar', os.path.join(models, CHECKPOINT), tensor,
                                f'{row},{col}', '--ref', os.path.join(models, SOURCE)))
    sc = out['scalars'][0]
    src = sc['source']
    check([int(x) for x in src['index']] == [want_row, col],
          f'{where}: tensormorph scalar --ref names source index {src["index"]}, expected [{want_row}, {col}]')
    check(it.same_number(f['source'], src['value']),
          f'{where}: source {f["source"]} in the inspector, {src["value"]} from tensormorph scalar --ref')
    check(it.same_number(f['abs_error'], src.get('error', 0)),
          f'{where}: value − source {f["abs_error"]} in the inspector, error {src.get("error", 0)} from the CLI')
    steps = float(src.get('errorSteps', 0))
    check(abs(float(f['error_steps'])) == steps and
          (float(f['error_steps']) < 0) == (float(src.get('error', 0)) < 0),
          f'{where}: {f["error_steps"]} steps in the inspector, {steps} (error {src.get("error", 0)}) from the CLI')
    # Half a step, plus what the F16 scale's rounding moves a level of up to 128 steps.
    check(steps <= 0.5 + 128 / 2048, f'{where}: Q8_0 rounds to nearest, yet {steps} steps')
    return f


def test_inspector(page, cli, models):
    print('inspector: a GGUF against its Hugging Face source')
    st = os.path.join(models, SOURCE, 'model.safetensors')
    for tensor, hf_name, index, mapped in (
            ('blk.0.attn_q.weight', 'model.layers.0.self_attn.q_proj.weight', [1, 7], True),
            ('blk.0.attn_q.weight', 'model.layers.0.self_attn.q_proj.weight', [131, 200], True),
            ('blk.1.attn_k.weight', 'model.layers.1.self_attn.k_proj.weight', [62, 3], True),
            ('blk.0.ffn_down.weight', 'model.layers.0.mlp.down_proj.weight', [3, 300], False)):
        hf = read_safetensors(st, hf_name)
        page.open(f'?checkpoint={CHECKPOINT}&tensor={tensor}&view=heatmap&ref={SOURCE}&index={index[0]},{index[1]}')
        it.heatmap_ready(page)
        f = check_element(page, cli, models, tensor, hf_name, index, hf, mapped)
        check(not mapped or hf_row(index[0], hf.shape[0]) != index[0],
              f'{tensor}{index}: a row the map leaves in place proves nothing')
        page.no_error(f'{tensor}{index}')
        if index == [1, 7]:
            page.d.execute_script("document.querySelector('.inspector .source-panel').scrollIntoView({block: 'end'})")
            page.shot('i31_inspector_source')
        print(f'  {tensor}{index}: source {f["source"]} = {hf_name}{f["source_index"][len(hf_name):]}, '
              f'{f["error_steps"]} steps')

    print('  a click on a cell inspects that element against its source row')
    tensor, hf_name = 'blk.0.attn_q.weight', 'model.layers.0.self_attn.q_proj.weight'
    page.open(f'?checkpoint={CHECKPOINT}&tensor={tensor}&view=heatmap&ref={SOURCE}')
    it.heatmap_ready(page)
    it.click_element_cell(page, 10, 20, 256, 256)
    page.wait(lambda: page.query().get('index'), 'the click to pick an element')
    index = [int(x) for x in page.query()['index'].split(',')]
    check_element(page, cli, models, tensor, hf_name, index,
                  read_safetensors(st, hf_name), True)

    print('  a source that does not pair is said; the element is still shown')
    page.open(f'?checkpoint={CHECKPOINT}&tensor={tensor}&view=heatmap&ref=no-such-source&index=1,7')
    it.heatmap_ready(page)
    f = source_panel(page, [1, 7])
    check('value' in f and 'source' not in f, f'with an unknown source the inspector shows {sorted(f)}')
    code = page.one('.inspector [data-field="source_error"]').get_attribute('data-code')
    check(code == 'NOT_FOUND', f'an unknown source says {code!r}, not NOT_FOUND')
    page.shot('i31_inspector_no_pair')


def numpy_histogram(values, lo, hi, bins):
    """ComputeStats' binning (core/stats.cc Binner), written again: floor of
    (v - lo) / width in double, clamped to the bins; non-finite skipped."""
    v = values.astype(np.float64).ravel()
    v = v[np.isfinite(v)]
    width = (hi - lo) / bins
    if not width > 0:
        return np.bincount(np.zeros(len(v), dtype=np.int64), minlength=bins)
    b = np.clip(np.floor((v - lo) / width), 0, bins - 1).astype(np.int64)
    return np.bincount(b, minlength=bins)


def source_counts(page):
    """The source histogram the page drew: its path's bar heights are not
    exact, so the counts come from the same ComputeStats the page asked."""
    page.one('svg[data-role="histogram"] path[data-role="source-histogram"]', 'the source histogram')
    q = page.query()
    body = {'checkpoint': q['checkpoint'], 'tensor': q['tensor'], 'bins': 160, 'reference': q['ref']}
    if 'group' in q:
        body['group'] = int(q['group'])
    return it.page_fetch(page, 'ComputeStats', body)


def test_distribution(page, models):
    print('distribution: the source histogram over the same bins')
    tensor, hf_name = 'blk.0.attn_q.weight', 'model.layers.0.self_attn.q_proj.weight'
    hf = read_safetensors(os.path.join(models, SOURCE, 'model.safetensors'), hf_name)
    page.open(f'?checkpoint={CHECKPOINT}&tensor={tensor}&view=dist&ref={SOURCE}')
    st = source_counts(page)
    got = [int(x) for x in st['referenceHistogram']]
    want = numpy_histogram(hf, float(st['histMin']), float(st['histMax']), len(st['histogram'])).tolist()
    check(got == want, f'{tensor}: the source histogram {got[:8]}… is not numpy\'s binning of {hf_name} {want[:8]}…')
    check(sum(got) == hf.size, f'{tensor}: the source histogram counts {sum(got)} of {hf.size} values')
    page.no_error('distribution with a source')
    page.shot('i31_inspector_distribution_source')

    print('  worst groups link to their distribution')
    page.wait(lambda: page.css('[data-field="worst_groups"][data-state="ready"] a[data-group]'),
              'the worst groups from the diff of this tensor')
    first = page.css('[data-field="worst_groups"] a[data-group]')[0]
    group = int(first.get_attribute('data-group'))
    first.click()
    page.wait(lambda: page.query().get('group') == str(group), f'the distribution of group {group}')
    st = source_counts(page)
    got = [int(x) for x in st['referenceHistogram']]
    # Q8_0: a group is a block of 32 along a row; group g is row g // 8,
    # columns (g % 8) * 32 ... +32 of the GGUF, its source that row's HF row.
    row, block = divmod(group, hf.shape[1] // 32)
    source_row = hf[hf_row(row, hf.shape[0]), block * 32:(block + 1) * 32]
    want = numpy_histogram(source_row, float(st['histMin']), float(st['histMax']), len(st['histogram'])).tolist()
    check(got == want, f'{tensor} group {group}: the source histogram {got} is not numpy\'s of its source row {want}')
    check(int(st['count']) == 32, f'{tensor} group {group}: {st["count"]} elements, a Q8_0 block has 32')
    page.no_error(f'distribution of group {group}')
    page.shot('i31_inspector_group_source')


def test_diff_worst_groups(page):
    print('diff: a tensor\'s worst groups link to their distribution')
    tensor = 'blk.0.attn_q.weight'
    page.open(f'?checkpoint={CHECKPOINT}&view=diff&ref={SOURCE}')
    page.one('#diff-run').click()
    page.one('[data-field="worst_tensor"]', 'the diff summary')
    page.one(f'.diff-rows tr[data-name="{tensor}"]', f'the diff row of {tensor}').click()
    page.wait(lambda: page.query().get('mode') == 'error' and page.query().get('tensor') == tensor,
              'the error heatmap')
    first = page.one('[data-role="worst"] tr[data-group] a', 'a worst group\'s link')
    group = first.find_element(it.By.XPATH, './ancestor::tr').get_attribute('data-group')
    first.click()
    page.wait(lambda: page.query().get('view') == 'dist' and page.query().get('group') == group,
              f'the distribution of group {group}')
    st = source_counts(page)
    check(int(st['count']) == 32, f'{tensor} group {group}: {st["count"]} elements, a Q8_0 block has 32')
    page.no_error(f'distribution of worst group {group}')
    page.shot('i31_inspector_diff_group')


def main():
    a = it.demo_arguments(__doc__).parse_args()
    os.makedirs(a.screenshots, exist_ok=True)
    if not it.have_demo(a, CHECKPOINT):
        return 1
    models = os.path.abspath(a.models)
    start = time.time()

    def body(started):
        started.server = it.Server(a.tensormorphd, models, a.assets)
        print(f'tensormorphd http on {started.server.url}')
        started.driver = it.start_browser()
        page = it.Page(started.driver, started.server.url, a.screenshots)
        test_inspector(page, a.tensormorph, models)
        test_distribution(page, models)
        test_diff_worst_groups(page)
        print(f'PASS: the inspector and distribution show the GGUF\'s Hugging Face source ({time.time() - start:.1f} s)')

    return it.run_test(body, a.screenshots, 'i31_inspector_failure.png')


if __name__ == '__main__':
    sys.exit(main())
