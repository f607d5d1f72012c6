"""Issue 34 point 1: `tensormorph compare --html FILE`, a self-contained
report, opened in headless Chromium with the network off.

Usage:
  compare_report_test.py TENSORMORPH MAKE_DEMO WORKDIR SCREENSHOTS

The demo (tensormorph-make-demo: an F32 GGUF source, its Q8_0 and Q4_K_M)
and a copy of the Q8_0 with one code moved 80 levels (same size, more
error: dominated by the Q8_0, a constructed case) are compared. The report
must:
  - load nothing but itself: the browser's network log (DevTools) holds one
    request, the file's own, and the page's resource timing none;
  - show every cell of the matrix with the type, bits per weight and SQNR of
    `--json compare`, the same numbers;
  - draw one chart point per quantization at (bits per weight, SQNR) of the
    JSON's totals, the planted copy marked dominated, the frontier through
    the others, and a per-layer curve per quantization at the JSON's errors;
  - sort by a click on a quantization's header (worst SQNR first, then
    reversed).
And `--html` onto an input is refused (REQUEST_INVALID) with the input
untouched.

Then the same files compared with the demo's importance matrix (`--imatrix
imatrix.dat`, which has no entry for the norms, output.weight and
token_embd.weight): the report shows, beside the unweighted figures, each
weighted cell's weighted SQNR and on each other cell why it is not weighted
(its imatrixNote), the weighted totals, and both charts on the weighted
error with a legend saying so: every figure the one of `--json compare
--imatrix`. Without an imatrix none of that is drawn.

Then with a budget (`--imatrix imatrix.dat --budget-bpw 6`, which mixes
the Q8_0 and the Q4_K_M): the report's "Mix for the budget" section gives
the mix's bytes, bits per weight, SQNR, squared and weighted error and
predicted file size, the matrix shades each tensor's chosen cell, the size
chart has the mix's point, and the llama-quantize command holds the
overrides: every one the `--json compare` summary's mix says. A budget
below the smallest mix (`--budget-bpw 2`: exit 3) says "Budget unmet" and
the least budget, and draws no choice, point or command. Without a budget
no mix section is drawn.
Screenshots i34_report_*.png under SCREENSHOTS.
"""

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time

import inspector_test as it

SOURCE = 'model-f32.gguf'
QUANTS = ['model-q8_0.gguf', 'model-q4_k_m.gguf', 'model-q8_0-planted.gguf']
PLANTED_TENSOR = 'blk.0.ffn_up.weight'
IMATRIX = 'imatrix.dat'  # tensormorph-make-demo's legacy-form importance matrix
BUDGET_BPW = '6'  # between the Q4_K_M (5.18) and the Q8_0 (8.52): a real mix
UNMET_BPW = '2'  # below the Q4_K_M, the smallest mix there is
EXIT_BUDGET_UNMET = 3


def number(v):
    """protobuf's JSON mapping: a double, or 'Infinity'; int64 as a string."""
    return float(v)


def same(a, b):
    a, b = float(a), float(b)
    return a == b or (math.isinf(a) and math.isinf(b) and (a > 0) == (b > 0))


def make_inputs(cli, make_demo, work):
    if os.path.exists(work):
        shutil.rmtree(work)
    subprocess.run([make_demo, work], check=True, stdout=subprocess.DEVNULL)
    it.plant(cli, os.path.join(work, QUANTS[0]), os.path.join(work, QUANTS[2]), PLANTED_TENSOR, (3, 5))


def compare_args(work, imatrix=None, budget=None):
    args = [os.path.join(work, f) for f in [SOURCE] + QUANTS]
    if imatrix:
        args += ['--imatrix', os.path.join(work, imatrix)]
    return args + ['--budget-bpw', budget] if budget else args


def compare_json(cli, work, imatrix=None, budget=None, exit_code=0):
    args = [cli, '--json', 'compare', *compare_args(work, imatrix, budget)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    it.check(r.returncode == exit_code, f'{" ".join(args)} exited {r.returncode}, not {exit_code}: {r.stderr.strip()}')
    events = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    rows = [e['row'] for e in events if 'row' in e]
    summaries = [e['summary'] for e in events if 'summary' in e]
    it.check(len(summaries) == 1, f'--json compare printed {len(summaries)} summaries')
    return rows, summaries[0]


def write_report(cli, work, path, imatrix=None, budget=None, exit_code=0):
    args = [cli, 'compare', *compare_args(work, imatrix, budget), '--html', path]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    it.check(r.returncode == exit_code, f'{" ".join(args)} exited {r.returncode}, not {exit_code}: {r.stderr.strip()}')
    it.check(os.path.isfile(path), f'compare --html wrote no {path}')


def test_refuses_an_input(cli, work):
    print('--html onto an input is refused, the input untouched')
    target = os.path.join(work, QUANTS[1])
    with open(target, 'rb') as f:
        before = f.read()
    r = subprocess.run([cli, 'compare', *[os.path.join(work, f) for f in [SOURCE] + QUANTS], '--html', target],
                       capture_output=True, text=True, timeout=300)
    it.check(r.returncode == 1, f'--html onto {QUANTS[1]} exited {r.returncode}, not 1 (usage): {r.stderr.strip()}')
    it.check('REQUEST_INVALID' in r.stderr, f'the refusal names no REQUEST_INVALID reason: {r.stderr.strip()}')
    with open(target, 'rb') as f:
        it.check(f.read() == before, f'{QUANTS[1]} changed although --html onto it was refused')


def start_offline_browser():
    options = it.webdriver.ChromeOptions()
    options.binary_location = '/usr/bin/chromium'
    for a in ('--headless=new', '--window-size=1480,1700', '--no-sandbox', '--disable-gpu',
              '--disable-dev-shm-usage', '--force-device-scale-factor=1', '--hide-scrollbars',
              '--allow-file-access-from-files'):
        options.add_argument(a)
    options.set_capability('goog:loggingPrefs', {'browser': 'ALL', 'performance': 'ALL'})
    driver = it.webdriver.Chrome(service=it.Service('/usr/bin/chromedriver'), options=options)
    driver.execute_cdp_cmd('Network.enable', {})
    driver.execute_cdp_cmd('Network.emulateNetworkConditions', {
        'offline': True, 'latency': 0, 'downloadThroughput': 0, 'uploadThroughput': 0})
    return driver


def requests_made(driver):
    urls = []
    for entry in driver.get_log('performance'):
        m = json.loads(entry['message'])['message']
        if m.get('method') == 'Network.requestWillBeSent':
            urls.append(m['params']['request']['url'])
    return urls


def check_network(page, expected, when):
    """The requests since the last look (the log is drained as read) are
    `expected`; nothing came from the page's resource timing or console."""
    print(f'the report loads nothing but itself ({when})')
    urls = requests_made(page.d)
    print(f'  requests: {urls}')
    it.check(urls == expected, f'{when}: the report made requests {urls}, not {expected}')
    resources = page.d.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    it.check(resources == [], f'the page fetched resources: {resources}')
    severe = [e['message'] for e in page.d.get_log('browser') if e['level'] == 'SEVERE']
    it.check(not severe, f'the browser console has errors: {severe}')


def check_matrix(page, rows, weighted=False):
    print('the matrix: every cell as --json compare says' + (' (and its weighted SQNR)' if weighted else ''))
    shown = page.d.execute_script(
        "return [...document.querySelectorAll('.cv-matrix tbody tr')].map(tr => [tr.dataset.tensor,"
        " [...tr.querySelectorAll('td.cv-cell')].map(td => [td.dataset.scheme, td.dataset.bpw, td.dataset.sqnr,"
        " td.dataset.present, td.firstChild.textContent, td.dataset.weightedSqnr || null,"
        " td.dataset.imatrixNote || null, (td.querySelector('.cv-w') || {}).textContent || null,"
        " (td.querySelector('.cv-w') || {}).title || null])]);")
    it.check(len(shown) == len(rows), f'the matrix has {len(shown)} rows, the JSON {len(rows)}')
    by_name = {name: cells for name, cells in shown}
    checked = 0
    for r in rows:
        cells = by_name.get(r['referenceName'])
        it.check(cells is not None, f'the matrix has no row {r["referenceName"]}')
        it.check(len(cells) == len(r['cells']), f'{r["referenceName"]}: {len(cells)} cells, the JSON {len(r["cells"])}')
        for q, (c, (scheme, bpw, sqnr, present, text, *w)) in enumerate(zip(r['cells'], cells)):
            where = f'{r["referenceName"]} [{q}]'
            it.check(present == ('true' if c['present'] else 'false'), f'{where}: present {present}, JSON {c["present"]}')
            it.check(scheme == c['scheme'], f'{where}: type {scheme}, JSON {c["scheme"]}')
            it.check(same(bpw, c['bitsPerWeight']), f'{where}: bits per weight {bpw}, JSON {c["bitsPerWeight"]}')
            it.check(same(sqnr, c['sqnrDb']), f'{where}: SQNR {sqnr}, JSON {c["sqnrDb"]}')
            sq = number(c['sqnrDb'])
            want = f'{c["scheme"]} {number(c["bitsPerWeight"]):.2f} ' + ('inf' if math.isinf(sq) else f'{sq:.2f}')
            it.check(text.startswith(want), f'{where}: the cell reads {text!r}, not {want!r}')
            it.check(text.endswith('!') == (c['maxExcessSteps'] > 0), f'{where}: "!" mark {text!r} against maxExcessSteps {c["maxExcessSteps"]}')
            check_weighted_cell(where, c, w, weighted)
            checked += 1
    planted = by_name[PLANTED_TENSOR][2][4]
    it.check(planted.endswith('!'), f'the planted tensor\'s cell reads {planted!r}, without the "!" beyond the bound')
    print(f'  {len(rows)} rows, {checked} cells equal')


def check_weighted_cell(where, c, shown, weighted):
    """A cell's weighted mark: none without an imatrix; with one, "w" and
    the JSON's weightedSqnrDb where imatrixUse is WEIGHTED, else "w -"
    whose tooltip is "not weighted: " and the JSON's imatrixNote."""
    wsqnr, note, mark, title = shown
    if not weighted or not c['present'] or c.get('undecodable'):
        it.check(shown == [None] * 4, f'{where}: a comparison without an imatrix shows a weighted mark {shown}')
        return
    if c['imatrixUse'] == 'IMATRIX_USE_WEIGHTED':
        it.check(wsqnr is not None and same(wsqnr, c['weightedSqnrDb']), f'{where}: weighted SQNR {wsqnr}, JSON {c["weightedSqnrDb"]}')
        it.check(mark == f'w {number(c["weightedSqnrDb"]):.2f}', f'{where}: the weighted mark reads {mark!r}')
        it.check(note is None, f'{where}: weighted, yet noted {note!r}')
    else:
        it.check(c['imatrixNote'], f'{where}: {c["imatrixUse"]} with no imatrixNote in the JSON')
        it.check(wsqnr is None and mark == 'w -', f'{where} ({c["imatrixUse"]}): shows {mark!r} weighted SQNR {wsqnr}')
        it.check(note == title == f'not weighted: {c["imatrixNote"]}', f'{where}: says {title!r}, the JSON {c["imatrixNote"]!r}')


def check_chart(page, summary):
    """The chart's y is the totals' SQNR, or with an imatrix their weighted
    error (what the server's dominance was decided on): lower is better."""
    weighted = summary.get('weighted', False)
    print('the size-versus-error chart: a point per quantization, the dominated marked, the frontier'
          + (' (on the weighted error)' if weighted else ''))
    totals = summary['totals']
    it.check(totals[2]['dominatedBy'] == [0], f'the planted copy is dominated by {totals[2]["dominatedBy"]}, not [0]')
    points = page.d.execute_script(
        "return [...document.querySelectorAll('svg.cv-chart .cv-point')].map(g => [Number(g.dataset.q),"
        " g.dataset.bpw, g.dataset.sqnr, g.dataset.dominated, g.querySelector('circle').getAttribute('cx'),"
        " g.querySelector('circle').getAttribute('cy'), g.dataset.weightedError || null]);")
    it.check(len(points) == len(totals), f'{len(points)} chart points for {len(totals)} quantizations')
    for q, bpw, sqnr, dominated, _, _, werr in points:
        t = totals[q]
        it.check(same(bpw, t['bitsPerWeight']) and same(sqnr, t['sqnrDb']),
                 f'point [{q}] at ({bpw}, {sqnr}), the JSON ({t["bitsPerWeight"]}, {t["sqnrDb"]})')
        if weighted:
            it.check(werr is not None and same(werr, t['weightedError']), f'point [{q}]: weighted error {werr}, JSON {t["weightedError"]}')
        else:
            it.check(werr is None, f'point [{q}] carries a weighted error {werr} without an imatrix')
        it.check(dominated == ('true' if t['dominatedBy'] else 'false'), f'point [{q}] dominated={dominated}, JSON {t["dominatedBy"]}')
    # More bits and less error sit further right and higher (SQNR) or lower
    # (weighted error).
    pos = {p[0]: (float(p[4]), float(p[5])) for p in points}
    it.check(pos[0][0] > pos[1][0], f'[0] (Q8_0) is not right of [1] (Q4_K_M): {pos}')
    if weighted:
        it.check(pos[0][1] > pos[1][1], f'[0] (Q8_0, less weighted error) is not below [1]: {pos}')
    else:
        it.check(pos[0][1] < pos[1][1], f'[0] (Q8_0, more SQNR) is not above [1]: {pos}')
    frontier = page.d.execute_script("return document.querySelector('svg.cv-chart .cv-frontier').getAttribute('points');")
    vertices = [tuple(map(float, v.split(','))) for v in frontier.split()]
    want = sorted((pos[q] for q, t in enumerate(totals) if not t['dominatedBy']), key=lambda p: p[0])
    it.check(vertices == want, f'the frontier runs through {vertices}, not the non-dominated {want}')
    check_error_legend(page, weighted)
    print(f'  {len(points)} points, dominated {[p[0] for p in points if p[3] == "true"]}, frontier of {len(vertices)}')


def check_error_legend(page, weighted):
    """Which error the charts show, said on the page and in the axes."""
    shown = page.d.execute_script(
        "return [document.querySelector('.cv').dataset.weighted, document.querySelector('svg.cv-chart').dataset.error,"
        " document.querySelector('svg.cv-layers').dataset.error,"
        " [...document.querySelectorAll('.cv-chart-legend')].map(p => p.innerText),"
        " [...document.querySelectorAll('.cv-charts svg')].map(s => s.textContent)];")
    flag, size_error, layer_error, legends, svg_text = shown
    if weighted:
        it.check([flag, size_error, layer_error] == ['true', 'weighted', 'weighted'],
                 f'the charts are not on the weighted error: {shown[:3]}')
        it.check(len(legends) == 1 and 'importance-weighted squared error' in legends[0],
                 f'no legend says the charts show the weighted error: {legends}')
        it.check(all('weighted squared error' in t for t in svg_text), 'an axis does not say "weighted squared error"')
    else:
        it.check([flag, size_error, layer_error] == ['false', 'sqnr', 'squared'], f'without an imatrix the charts are on {shown[:3]}')
        it.check(not legends and not any('weighted' in t for t in svg_text), f'without an imatrix a chart says "weighted": {legends}')


def check_layers(page, summary):
    print('per-layer error curves: a line per quantization at the JSON\'s errors')
    shown = page.d.execute_script(
        "return [...document.querySelectorAll('svg.cv-layers .cv-layer-line')].map(g => [Number(g.dataset.q),"
        " [...g.querySelectorAll('.cv-layer-point')].map(c => [c.dataset.layer, c.dataset.sse, c.dataset.dominated,"
        " c.dataset.weightedError || null])]);")
    it.check(len(shown) == len(summary['totals']), f'{len(shown)} layer curves for {len(summary["totals"])} quantizations')
    layers = sorted(summary['layers'], key=lambda l: int(l['layer'].rsplit('.', 1)[1]))
    for q, pts in shown:
        it.check([p[0] for p in pts] == [l['layer'] for l in layers], f'curve [{q}] runs over {[p[0] for p in pts]}')
        for (name, sse, dominated, werr), l in zip(pts, layers):
            it.check(same(sse, l['sumSquaredError'][q]), f'curve [{q}] at {name}: {sse}, JSON {l["sumSquaredError"][q]}')
            if summary.get('weighted', False):
                it.check(werr is not None and same(werr, l['weightedError'][q]),
                         f'curve [{q}] at {name}: weighted error {werr}, JSON {l["weightedError"][q]}')
            else:
                it.check(werr is None, f'curve [{q}] at {name}: a weighted error {werr} without an imatrix')
            want = 'true' if q in l['dominated'] else 'false'
            it.check(dominated == want, f'curve [{q}] at {name}: dominated={dominated}, JSON {l["dominated"]}')
    # The planted copy is worse than the Q8_0 in blk.0 only.
    marked = {l['layer']: l['dominated'] for l in layers}
    it.check(2 in marked['blk.0'] and 2 not in marked.get('blk.1', []),
             f'the planted copy is dominated per layer as {marked}, not in blk.0 only')
    print(f'  {len(shown)} curves over {len(layers)} layers, dominated per layer {marked}')


def check_totals(page, summary):
    """The totals table: with an imatrix, each quantization's tensors
    weighted, weighted SQNR and weighted error as the JSON's, and the
    tensors it did not weigh listed; without one, none of those."""
    weighted = summary.get('weighted', False)
    print('the totals' + (' and their weighted figures' if weighted else ''))
    shown = page.d.execute_script(
        "return [[...document.querySelectorAll('.cv-totals th')].map(th => th.innerText),"
        " [...document.querySelectorAll('.cv-totals tbody tr')].map(tr => [tr.dataset.bytes,"
        " tr.dataset.tensorsWeighted || null, tr.dataset.weightedSqnr || null, tr.dataset.weightedError || null]),"
        " [...document.querySelectorAll('.cv-unweighted-list')].map(p => p.innerText)];")
    heads, trs, unweighted = shown
    totals = summary['totals']
    it.check(len(trs) == len(totals), f'{len(trs)} totals rows for {len(totals)} quantizations')
    if not weighted:
        plain = ['', 'quantization', 'tensors', 'bytes', 'bits per weight', 'SQNR dB', 'squared error', 'dominated by']
        it.check(heads == plain and not unweighted, f'without an imatrix the totals read {heads}, {unweighted}')
        it.check(all(t[1:] == [None] * 3 for t in trs), f'without an imatrix the totals carry weighted figures {trs}')
        return
    it.check(heads[-4:] == ['W tensors', 'W SQNR dB', 'weighted error', 'dominated by'],
             f'the weighted totals\' columns read {heads}')
    for q, ((nbytes, tw, wsqnr, werr), t) in enumerate(zip(trs, totals)):
        it.check(same(nbytes, t['bytes']) and same(tw, t['tensorsWeighted']) and same(wsqnr, t['weightedSqnrDb'])
                 and same(werr, t['weightedError']),
                 f'totals [{q}]: {nbytes} bytes, {tw} weighted, {wsqnr} dB, {werr}; the JSON {t}')
    it.check(summary['unweighted'] and len(unweighted) == 1 and unweighted[0].endswith(', '.join(summary['unweighted'])),
             f'the tensors not weighted read {unweighted}, the JSON {summary["unweighted"]}')
    print(f'  {len(trs)} rows, {len(summary["unweighted"])} tensors not weighted')


def column_sqnr(page, q):
    """(tensor, SQNR of quantization q) down the matrix as shown. Read as
    text: WebDriver hands JavaScript's Infinity back as null."""
    shown = page.d.execute_script(
        "return [...document.querySelectorAll('.cv-matrix tbody tr')].map(tr =>"
        " [tr.dataset.tensor, tr.querySelectorAll('td.cv-cell')[arguments[0]].dataset.sqnr]);", q)
    return [(name, float(v)) for name, v in shown]


def check_sorting(page, rows):
    print('a click on a header sorts by that quantization\'s SQNR')
    header = page.css('.cv-matrix th[data-sort="1"]')[0]
    header.click()
    up = column_sqnr(page, 1)
    want = sorted(((r['referenceName'], number(r['cells'][1]['sqnrDb'])) for r in rows), key=lambda x: x[1])
    it.check([v for _, v in up] == [v for _, v in want], f'after one click [1] reads {up}, not ascending')
    page.shot('i34_report_sorted')
    header.click()
    down = column_sqnr(page, 1)
    it.check([v for _, v in down] == sorted((v for _, v in want), reverse=True), f'after two clicks [1] reads {down}, not descending')
    page.css('.cv-matrix th[data-sort="name"]')[0].click()
    names = [n for n, _ in column_sqnr(page, 1)]
    it.check(names == sorted(names), f'sorted by name the rows read {names}')
    print(f'  worst of [1] first: {up[0][0]} at {up[0][1]:.2f} dB')


def shown_mix(page):
    """What the page's mix section shows: its data, the matrix's shaded
    cells, the chart's mix point and the command's text."""
    return page.d.execute_script(
        "const sec = document.querySelector('.cv-mix');"
        "const fig = document.querySelector('.cv-mix-figures tbody tr');"
        "const unmet = document.querySelector('.cv-mix-unmet');"
        "const point = document.querySelector('svg.cv-chart .cv-mix-point');"
        "const pre = document.querySelector('pre.cv-command');"
        "return {section: sec && Object.assign({}, sec.dataset), heading: sec && sec.querySelector('h3').textContent,"
        " figures: fig && Object.assign({}, fig.dataset), unmet: unmet && [Object.assign({}, unmet.dataset), unmet.innerText],"
        " point: point && Object.assign({}, point.dataset), command: pre && pre.textContent,"
        " notes: [...document.querySelectorAll('.cv-mix-note')].map(p => p.innerText),"
        " chosen: [...document.querySelectorAll('.cv-matrix td.cv-chosen')].map(td =>"
        "   [td.closest('tr').dataset.tensor, Number(td.dataset.q), td.dataset.scheme, td.dataset.chosen])};")


def command_words(text):
    """The shell words of the page's command, its line continuations joined."""
    return shlex.split(text.replace(' \\\n', ' '))


def check_mix(page, summary, budget):
    """The mix section, the matrix's chosen cells, the chart's mix point and
    the llama-quantize command: each the figure --json compare's mix gives."""
    mix = summary['mix']
    weighted = summary.get('weighted', False)
    print(f'the mix for --budget-bpw {budget}: figures, chosen cells, chart point and command as --json says')
    shown = shown_mix(page)
    it.check(shown['section'] is not None, 'a report of a comparison with a budget has no mix section')
    it.check(shown['section'] == {'budgetBytes': mix['budgetBytes'], 'unmet': 'false'},
             f'the mix section says {shown["section"]}, the JSON budgetBytes {mix["budgetBytes"]}')
    it.check(f'{budget} bits per weight ({mix["budgetBytes"]} bytes as applied)' in shown['heading'],
             f'the mix\'s heading reads {shown["heading"]!r}')
    fig = shown['figures']
    for key, want in (('bytes', 'bytes'), ('bpw', 'bitsPerWeight'), ('sqnr', 'sqnrDb'), ('sse', 'sumSquaredError'),
                      ('fileSize', 'predictedFileSize')):
        it.check(same(fig[key], mix[want]), f'the mix\'s {want} reads {fig[key]}, the JSON {mix[want]}')
    if weighted:
        it.check(same(fig['weightedError'], mix['weightedError']), f'the mix\'s weighted error {fig.get("weightedError")}, JSON {mix["weightedError"]}')
    chosen = {name: (q, scheme) for name, q, scheme, _ in shown['chosen']}
    want = {c['referenceName']: (c['quantization'], c['scheme']) for c in mix['choices']}
    it.check(len(shown['chosen']) == len(mix['choices']) and chosen == want,
             f'the matrix shades {shown["chosen"]}, the JSON chose {want}')
    point = shown['point']
    it.check(point is not None and same(point['bpw'], mix['bitsPerWeight']) and same(point['sqnr'], mix['sqnrDb']),
             f'the chart\'s mix point is {point}, the JSON ({mix["bitsPerWeight"]}, {mix["sqnrDb"]})')
    if weighted:
        it.check(same(point['weightedError'], mix['weightedError']), f'the mix point\'s weighted error {point}')
    words = command_words(shown['command'] or '')
    overrides = [words[i + 1] for i, w in enumerate(words) if w == '--tensor-type']
    it.check(words[:1] == ['llama-quantize'] and overrides == mix['tensorTypeOverrides'],
             f'the command\'s overrides are {overrides}, the JSON {mix["tensorTypeOverrides"]}')
    ftype = mix['baseFtypeName'] or 'FTYPE'
    it.check(words[-3:] == ['SOURCE.gguf', 'OUT.gguf', ftype], f'the command ends {words[-3:]}, not with the ftype {ftype}')
    imatrix = ['--imatrix', 'IMATRIX'] if weighted else []
    it.check(words[1:1 + len(imatrix)] == imatrix, f'the command begins {words[:3]}: a weighted mix holds with its matrix only')
    it.check(len(words) == 4 + len(imatrix) + 2 * len(overrides), f'the command has words beyond the overrides: {words}')
    it.check(any(f'Predicted file size {mix["predictedFileSize"]} bytes' in n for n in shown['notes']),
             f'no note gives the predicted file size {mix["predictedFileSize"]}: {shown["notes"]}')
    if not mix['baseFtypeName']:
        it.check(any('put for FTYPE the one it was made with' in n for n in shown['notes']),
                 f'the base names no ftype, and no note says what to put for FTYPE: {shown["notes"]}')
    print(f'  {mix["bytes"]} bytes at {float(mix["bitsPerWeight"]):.4f} bits per weight, {len(chosen)} chosen cells,'
          f' {len(overrides)} overrides')


def check_unmet(page, summary):
    """A budget below the smallest mix: said plainly, with the least budget,
    and no choice, point or command drawn."""
    mix = summary['mix']
    print('a budget below the smallest mix: "Budget unmet" and the least budget, nothing chosen')
    it.check(mix['budgetUnmet'] is True, f'--budget-bpw {UNMET_BPW}: the JSON says budgetUnmet {mix["budgetUnmet"]}')
    shown = shown_mix(page)
    it.check(shown['section'] == {'budgetBytes': mix['budgetBytes'], 'unmet': 'true'}, f'the mix section says {shown["section"]}')
    it.check(shown['unmet'] is not None, 'the report does not say the budget is unmet')
    data, text = shown['unmet']
    it.check(same(data['leastBytes'], mix['leastBytes']) and same(data['leastBpw'], mix['leastBitsPerWeight']),
             f'the least budget reads {data}, the JSON {mix["leastBytes"]} bytes, {mix["leastBitsPerWeight"]} bits per weight')
    it.check(text.startswith('Budget unmet') and f'{mix["leastBytes"]} bytes' in text and mix['budgetBytes'] in text,
             f'the unmet budget reads {text!r}')
    it.check(not shown['chosen'] and shown['point'] is None and shown['command'] is None and shown['figures'] is None,
             f'an unmet budget still draws a mix: {shown}')
    print(f'  {text}')


def check_no_mix(page):
    shown = shown_mix(page)
    it.check(shown['section'] is None and not shown['chosen'] and shown['point'] is None,
             f'a comparison without a budget draws a mix: {shown}')


def test_mix(cli, work, page):
    print(f'compare --imatrix --budget-bpw {BUDGET_BPW}: the report shows the mix')
    rows, summary = compare_json(cli, work, IMATRIX, BUDGET_BPW)
    sources = {c['quantization'] for c in summary['mix']['choices']}
    it.check(sources == {0, 1}, f'--budget-bpw {BUDGET_BPW} mixes from {sources}, not from [0] and [1]')
    report = os.path.join(work, 'report', 'compare-mix.html')
    write_report(cli, work, report, IMATRIX, BUDGET_BPW)
    page.d.get('file://' + report)
    page.wait(lambda: page.css('.cv-matrix tbody tr'), 'the report\'s matrix')
    page.d.execute_script("document.querySelector('.cv-mix').scrollIntoView();")
    page.shot('i34_report_mix')
    check_network(page, ['file://' + report], 'with a mix')
    check_mix(page, summary, BUDGET_BPW)
    check_matrix(page, rows, weighted=True)
    check_totals(page, summary)
    print(f'compare --budget-bpw {UNMET_BPW}: exit {EXIT_BUDGET_UNMET}, and the report says the budget is unmet')
    _, summary = compare_json(cli, work, budget=UNMET_BPW, exit_code=EXIT_BUDGET_UNMET)
    report = os.path.join(work, 'report', 'compare-unmet.html')
    write_report(cli, work, report, budget=UNMET_BPW, exit_code=EXIT_BUDGET_UNMET)
    open_report(page, 'file://' + report, 'i34_report_unmet')
    check_unmet(page, summary)


def open_report(page, url, shot):
    page.d.get(url)
    page.wait(lambda: page.css('.cv-matrix tbody tr'), 'the report\'s matrix')
    page.shot(shot)
    check_network(page, [url], 'opened')


def test_weighted(cli, work, page):
    print('compare --imatrix: the report shows the weighted figures beside the others')
    rows, summary = compare_json(cli, work, IMATRIX)
    it.check(summary.get('weighted') is True, f'--json compare --imatrix says weighted={summary.get("weighted")}')
    report = os.path.join(work, 'report', 'compare-weighted.html')
    write_report(cli, work, report, IMATRIX)
    open_report(page, 'file://' + report, 'i34_report_weighted')
    check_matrix(page, rows, weighted=True)
    check_totals(page, summary)
    check_chart(page, summary)
    check_layers(page, summary)
    check_no_mix(page)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('tensormorph')
    ap.add_argument('make_demo')
    ap.add_argument('workdir')
    ap.add_argument('screenshots')
    a = ap.parse_args()
    os.makedirs(a.screenshots, exist_ok=True)
    work = os.path.abspath(a.workdir)

    def body(started):
        make_inputs(a.tensormorph, a.make_demo, work)
        rows, summary = compare_json(a.tensormorph, work)
        report = os.path.join(work, 'report', 'compare.html')
        os.makedirs(os.path.dirname(report), exist_ok=True)
        write_report(a.tensormorph, work, report)
        test_refuses_an_input(a.tensormorph, work)
        print(f'report {report}: {os.path.getsize(report)} bytes')
        started.driver = start_offline_browser()
        page = it.Page(started.driver, '', a.screenshots)
        open_report(page, 'file://' + report, 'i34_report_overview')
        check_matrix(page, rows)
        check_totals(page, summary)
        check_chart(page, summary)
        check_layers(page, summary)
        check_no_mix(page)
        check_sorting(page, rows)
        check_network(page, [], 'after the clicks')
        test_weighted(a.tensormorph, work, page)
        test_mix(a.tensormorph, work, page)
        print('PASS')

    return it.run_test(body, a.screenshots, 'i34_report_failure.png')


if __name__ == '__main__':
    time.tzset()
    sys.exit(main())
