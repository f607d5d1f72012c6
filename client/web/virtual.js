// Long lists drawn only where they show: a list of thousands of rows keeps
// about a screenful of them in the DOM (fixed row height, a spacer above and
// below so the scrollbar tells the truth), redrawn once per animation frame
// on scroll or when its rows change. Short lists (at most VIRTUAL_FROM rows)
// are drawn whole, so a small checkpoint's page holds every row.

export const VIRTUAL_FROM = 200;
const OVERSCAN = 12;  // rows drawn beyond each edge of the view

// `scroller`: the element that scrolls (CSS gives it a max height when it
// carries the class `virtual`); `body`: where rows go (the scroller itself,
// or a table's tbody inside it); `spacer()` makes an empty row (a div, or a
// tr with one cell); `draw(i)` makes row i. Returns { setCount(n), redraw(),
// schedule() }.
export function virtualRows({ scroller, body, spacer, draw }) {
  let count = 0;
  let frame = 0;
  let rowHeight = 0;  // measured from the first row drawn
  const top = spacer();
  const bottom = spacer();
  top.classList.add('spacer');
  bottom.classList.add('spacer');
  top.dataset.role = 'spacer-top';
  bottom.dataset.role = 'spacer-bottom';

  const redraw = () => {
    if (frame) cancelAnimationFrame(frame);
    frame = 0;
    const whole = count <= VIRTUAL_FROM;
    scroller.classList.toggle('virtual', !whole);
    scroller.dataset.rows = String(count);
    let first = 0;
    let last = count;
    if (!whole) {
      const h = rowHeight || 28;
      // Rows above the first row drawn: the top spacer's offset is where
      // row 0 would be (headers above it scroll with the list).
      const offset = Math.max(0, scroller.scrollTop - (top.offsetTop || 0));
      first = Math.max(0, Math.floor(offset / h) - OVERSCAN);
      last = Math.min(count, first + Math.ceil((scroller.clientHeight || 800) / h) + 2 * OVERSCAN);
    }
    const rows = [];
    for (let i = first; i < last; i++) rows.push(draw(i));
    body.replaceChildren(top, ...rows, bottom);
    if (!whole && rows.length && !rowHeight) {
      rowHeight = rows[0].getBoundingClientRect().height || 28;
    }
    const h = rowHeight || 28;
    top.style.height = `${first * h}px`;
    bottom.style.height = `${(count - last) * h}px`;
    top.hidden = !first;
    bottom.hidden = count === last;
  };
  const schedule = () => {
    if (!frame) frame = requestAnimationFrame(redraw);
  };
  scroller.addEventListener('scroll', schedule, { passive: true });
  return {
    setCount(n) {
      count = n;
      redraw();
    },
    redraw,
    schedule,
    // Scrolls so that row i shows (the scroller's own scroll only).
    reveal(i) {
      const h = rowHeight || 28;
      const y = (top.offsetTop || 0) + i * h;
      if (y < scroller.scrollTop || y + h > scroller.scrollTop + scroller.clientHeight) {
        scroller.scrollTop = Math.max(0, y - scroller.clientHeight / 2);
      }
      redraw();
    },
  };
}
