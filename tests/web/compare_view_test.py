"""Issue 34 point 4: the web inspector's Compare view against a live server.

Usage:
  compare_view_test.py TENSORMORPHD TENSORMORPH MAKE_DEMO WORKDIR SCREENSHOTS [--assets DIR]

The inputs of compare_report_test.py (the demo's F32 source, its Q8_0 and
Q4_K_M, and a Q8_0 copy with one code of blk.0.ffn_up.weight moved 80
levels) under a tensormorphd's root. The page, opened on the source's
Compare tab, lists the other checkpoints; the three are ticked and compared
(CompareQuantizations through the HTTP API). Then:
  - the matrix, the chart's points, the dominated mark and the frontier equal
    what `tensormorph --json compare` says of the same files;
  - a click on the planted copy's cell of blk.0.ffn_up.weight shows two
    error heatmaps side by side, the planted copy's and the Q8_0's, on one
    grid and one colour scale;
  - the cursor is linked: a move over the planted element's cell on the left
    puts the crosshair on the same cell on the right, and both readouts give
    that cell's error as GetHeatmap (asked here, over HTTP) gives it: 80 and
    more steps on the left, in alarm colour, within the bound on the right;
  - the demo's importance matrix typed into the form weighs the comparison
    (imatrix in the URL and the request): the weighted cells, totals and
    charts equal `tensormorph --json compare --imatrix` of the same files;
  - a budget typed in beside it asks for the mix (budget_bpw in the URL and
    budgetBitsPerWeight in the request): the mix's figures, the matrix's
    chosen cells, the chart's mix point and the llama-quantize command's
    overrides equal `tensormorph --json compare --imatrix --budget-bpw`'s;
    a budget_bpw that is no positive number is the server's to refuse
    (REQUEST_INVALID, field budget_bits_per_weight), shown in the banner.
Screenshots i34_compare_*.png under SCREENSHOTS.
"""

import argparse
import json
import os
import re
import sys
import urllib.request

import compare_report_test as report
import inspector_test as it

PLANTED = (3, 5)  # compare_report_test's planted element


def api(server, method, body):
    req = urllib.request.Request(server.url + 'v1/' + method, data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def choose_and_compare(page):
    print('the Compare tab lists the checkpoints; three are ticked and compared')
    page.open(f'?checkpoint={report.SOURCE}&view=compare')
    page.wait(lambda: len(page.css('.compare-picker input[type=checkbox]')) >= 3, 'the checkpoint picker')
    listed = [b.get_attribute('data-checkpoint') for b in page.css('.compare-picker input[type=checkbox]')]
    it.check(report.SOURCE not in listed, f'the picker offers the source itself: {listed}')
    for q in report.QUANTS:
        it.check(q in listed, f'the picker does not list {q}: {listed}')
    # In the order of the comparison: the matrix's columns follow it.
    for q in report.QUANTS:
        page.one(f'.compare-picker input[data-checkpoint="{q}"]').click()
    page.one('#compare-run').click()
    page.wait(lambda: page.css('.compare-result[data-ready="true"] .cv-matrix tbody tr'), 'the comparison')
    page.no_error('the comparison')
    it.check(page.query().get('quants') == ','.join(report.QUANTS), f'the URL names {page.query()}')
    page.shot('i34_compare_view')


def cell_centre_move(page, side, row, col, rows, cols):
    """A mousemove inside cell (row, col) of one side's overlay. Chromium
    rounds a synthetic event's coordinates to whole pixels, so the first
    whole pixel inside the cell (cells are over a pixel wide) is used."""
    page.d.execute_script(
        "const o = document.querySelector('.pair-overlay[data-side=\"' + arguments[0] + '\"]');"
        "const b = o.getBoundingClientRect();"
        "const x = Math.ceil(b.left + arguments[2] / arguments[4] * b.width + 0.01);"
        "const y = Math.ceil(b.top + arguments[1] / arguments[3] * b.height + 0.01);"
        "o.dispatchEvent(new MouseEvent('mousemove', {clientX: x, clientY: y, bubbles: true}));",
        side, row, col, rows, cols)


def pixel(page, side, row, col):
    return page.d.execute_script(
        "const c = document.querySelector('.pair-canvas[data-side=\"' + arguments[0] + '\"]');"
        "return [...c.getContext('2d').getImageData(arguments[2], arguments[1], 1, 1).data].slice(0, 3);",
        side, row, col)


def readout_steps(page, side):
    text = page.css(f'[data-field="pair_value_{side}"]')[0].text
    m = re.search(r': (\S+) steps$', text)
    it.check(m, f'readout {side} reads {text!r}')
    return float(m.group(1)), text


def check_pair(page, server):
    tensor = report.PLANTED_TENSOR
    print(f'a click on [2] {tensor}: its error heatmap beside [0]\'s, one scale, a linked cursor')
    page.one(f'.cv-matrix tr[data-tensor="{tensor}"] td.cv-cell[data-q="2"]').click()
    page.wait(lambda: page.css('.compare-pair[data-ready="true"]'), 'the two error heatmaps')
    page.no_error('the two error heatmaps')
    panels = [int(p.get_attribute('data-q')) for p in page.css('.pair-panel')]
    it.check(panels == [2, 0], f'the pair shows {panels}, not [2, 0]')
    cells = [c.get_attribute('data-cells') for c in page.css('.pair-canvas')]
    it.check(len(cells) == 2 and cells[0] == cells[1], f'the two heatmaps are on different grids: {cells}')
    rows, cols = map(int, cells[0].split('x'))
    legends = page.css('.pair-legend')
    it.check(len(legends) == 1, f'{len(legends)} colour scales for the pair, not one')
    edges = page.d.execute_script(
        "const a = document.querySelector('.pair-canvas[data-side=\"0\"]').dataset;"
        " return [a.rowEdges.split(',').map(Number), a.colEdges.split(',').map(Number)];")
    # The cell that holds the planted element (a cell covers several rows
    # when the tensor has more rows than the grid).
    r = max(i for i, e in enumerate(edges[0][:-1]) if e <= PLANTED[0])
    c = max(j for j, e in enumerate(edges[1][:-1]) if e <= PLANTED[1])
    cell_centre_move(page, 0, r, c, rows, cols)
    cursors = page.d.execute_script("return [...document.querySelectorAll('.pair-overlay')].map(o => o.dataset.cursor || null);")
    it.check(cursors == [f'{r},{c}', f'{r},{c}'], f'the cursors are at {cursors}, not both at {r},{c}')
    expected = []
    for q in (2, 0):
        resp = api(server, 'GetHeatmap', {
            'checkpoint': report.QUANTS[q], 'tensor': tensor, 'mode': 'HEATMAP_MODE_ERROR', 'width': cols,
            'height': rows, 'reference': report.SOURCE})
        expected.append(float(resp['values'][r * int(resp['width']) + c]))
    shown = [readout_steps(page, side) for side in (0, 1)]
    for (value, text), want in zip(shown, expected):
        it.check(abs(value - want) <= abs(want) * 1e-3 + 1e-6, f'the readout {text!r} is not GetHeatmap\'s {want}')
    print(f'  at cell {r},{c}: [2] {shown[0][0]} steps, [0] {shown[1][0]} steps (GetHeatmap: {expected})')
    it.check(expected[0] >= 79 and expected[1] <= 0.5, f'the planted cell\'s errors are {expected}')
    left, right = pixel(page, 0, r, c), pixel(page, 1, r, c)
    it.check(it.alarm(left) and not it.alarm(right), f'the planted cell is coloured {left} and {right}: not alarm on the left only')
    # The same move over the right heatmap moves the left one's cursor.
    cell_centre_move(page, 1, r + 1, c + 2, rows, cols)
    cursors = page.d.execute_script("return [...document.querySelectorAll('.pair-overlay')].map(o => o.dataset.cursor || null);")
    it.check(cursors == [f'{r + 1},{c + 2}'] * 2, f'a move on the right put the cursors at {cursors}')
    cell_centre_move(page, 0, r, c, rows, cols)
    page.shot('i34_compare_pair')


def compare_weighted(page, cli, work):
    print('an importance matrix typed in weighs the comparison')
    rows, summary = report.compare_json(cli, work, report.IMATRIX)
    page.one('#compare-imatrix').send_keys(report.IMATRIX)
    page.one('#compare-run').click()
    page.wait(lambda: page.css('.compare-result[data-ready="true"] .cv[data-weighted="true"] .cv-matrix tbody tr'),
              'the weighted comparison')
    page.no_error('the weighted comparison')
    want = {'quants': ','.join(report.QUANTS), 'imatrix': report.IMATRIX}
    it.check({k: page.query().get(k) for k in want} == want, f'the URL names {page.query()}')
    # The drawing from its totals down (the form and picker are above it,
    # the page's fixed top bar over it).
    page.d.execute_script("document.querySelector('.compare-result .cv').scrollIntoView(); window.scrollBy(0, -70);")
    page.shot('i34_compare_weighted')
    report.check_matrix(page, rows, weighted=True)
    report.check_totals(page, summary)
    report.check_chart(page, summary)
    report.check_layers(page, summary)


def compare_mix(page, cli, work):
    print(f'a budget of {report.BUDGET_BPW} bits per weight typed in: the view shows the mix')
    rows, summary = report.compare_json(cli, work, report.IMATRIX, report.BUDGET_BPW)
    page.one('#compare-budget').send_keys(report.BUDGET_BPW)
    page.one('#compare-run').click()
    page.wait(lambda: page.css('.compare-result[data-ready="true"] .cv-mix'), 'the comparison with a budget')
    page.no_error('the comparison with a budget')
    want = {'quants': ','.join(report.QUANTS), 'imatrix': report.IMATRIX, 'budget_bpw': report.BUDGET_BPW}
    it.check({k: page.query().get(k) for k in want} == want, f'the URL names {page.query()}')
    page.d.execute_script("document.querySelector('.compare-result .cv-mix').scrollIntoView(); window.scrollBy(0, -70);")
    page.shot('i34_compare_mix')
    report.check_mix(page, summary, report.BUDGET_BPW)
    report.check_matrix(page, rows, weighted=True)


def refused_budget(page):
    print('a budget of -1 in the URL: the server refuses it, and the banner says why')
    page.open(f'?checkpoint={report.SOURCE}&view=compare&quants={",".join(report.QUANTS)}&budget_bpw=-1')
    page.wait(lambda: page.banner(), 'the error banner')
    reason = page.one('#banner [data-field="error_reason"]').text
    message = page.one('#banner [data-field="error_message"]').text
    it.check(reason == 'REQUEST_INVALID' and 'budget_bits_per_weight' in message,
             f'the banner reads {reason} {message!r}, not REQUEST_INVALID on budget_bits_per_weight')
    it.check(not page.css('.compare-result .cv'), 'a refused budget still drew a comparison')
    print(f'  {reason}: {message}')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('tensormorphd')
    ap.add_argument('tensormorph')
    ap.add_argument('make_demo')
    ap.add_argument('workdir')
    ap.add_argument('screenshots')
    ap.add_argument('--assets')
    a = ap.parse_args()
    os.makedirs(a.screenshots, exist_ok=True)
    work = os.path.abspath(a.workdir)

    def body(started):
        report.make_inputs(a.tensormorph, a.make_demo, work)
        rows, summary = report.compare_json(a.tensormorph, work)
        started.server = it.Server(a.tensormorphd, work, a.assets)
        print(f'tensormorphd http on {started.server.url}')
        started.driver = it.start_browser()
        page = it.Page(started.driver, started.server.url, a.screenshots)
        choose_and_compare(page)
        report.check_matrix(page, rows)
        report.check_totals(page, summary)
        report.check_chart(page, summary)
        report.check_layers(page, summary)
        check_pair(page, started.server)
        compare_weighted(page, a.tensormorph, work)
        compare_mix(page, a.tensormorph, work)
        refused_budget(page)
        print('PASS')

    return it.run_test(body, a.screenshots, 'i34_compare_failure.png')


if __name__ == '__main__':
    sys.exit(main())
