// Long lists drawn only where they show: a list of thousands of rows keeps
// about a screenful of them in the DOM (fixed row height, a spacer above and
// below so the scrollbar tells the truth), redrawn once per animation frame
// on scroll or when its rows change. Short lists (at most VIRTUAL_FROM rows)
// are drawn whole, so a small checkpoint's page holds every row.
//
// A redraw reads no layout (scrollTop comes from the scroll event, the
// view's height from the window, the row height and the offset of row 0 are
// measured once), so drawing rows never forces a synchronous layout of the
// page.

export const VIRTUAL_FROM = 200;
const OVERSCAN = 12;  // rows drawn beyond each edge of the view

// `scroller`: the element that scrolls (CSS gives it a max height of 70vh
// when it carries the class `virtual`); `body`: where rows go (the scroller
// itself, or a table's tbody inside it); `spacer()` makes an empty row (a
// div, or a tr with one cell); `draw(i)` makes row i; `id(i)`, when given,
// names what row i shows: a redraw whose rows are the last one's (rows
// streaming in out of view) leaves the DOM rows alone and only resizes the
// spacers. Returns { setCount(n), redraw(), schedule(), toTop() }.
export function virtualRows({ scroller, body, spacer, draw, id }) {
  let drawn = [];  // id(i) of the rows in the DOM
  let count = 0;
  let frame = 0;
  let rowHeight = 0;  // measured from the first row drawn
  let offset = -1;    // where row 0 starts in the scroller (a table's head above it)
  let scrollTop = 0;  // as the last scroll event left it
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
    const h = rowHeight || 30;
    if (!whole) {
      const view = 0.7 * (window.innerHeight || 1000);  // the CSS max height
      first = Math.max(0, Math.floor(Math.max(0, scrollTop - Math.max(0, offset)) / h) - OVERSCAN);
      last = Math.min(count, first + Math.ceil(view / h) + 2 * OVERSCAN);
    }
    const rows = [];
    const ids = id ? [] : null;
    if (id) for (let i = first; i < last; i++) ids.push(id(i));
    const same = id && ids.length === drawn.length && ids.every((x, k) => x === drawn[k]) && body.firstChild === top;
    if (!same) {
      for (let i = first; i < last; i++) rows.push(draw(i));
      body.replaceChildren(top, ...rows, bottom);
      drawn = ids || [];
    }
    top.style.height = `${first * h}px`;
    bottom.style.height = `${(count - last) * h}px`;
    top.hidden = !first;
    bottom.hidden = count === last;
    if (!whole && rows.length && !rowHeight) {
      // Once: the row height and where row 0 starts (one layout).
      rowHeight = rows[0].getBoundingClientRect().height || 30;
      offset = rows[0].getBoundingClientRect().top - scroller.getBoundingClientRect().top + scroller.scrollTop;
      if (rowHeight !== h) redraw();
    }
  };
  const schedule = () => {
    if (!frame) frame = requestAnimationFrame(redraw);
  };
  scroller.addEventListener('scroll', () => {
    scrollTop = scroller.scrollTop;
    schedule();
  }, { passive: true });
  return {
    setCount(n) {
      count = n;
      redraw();
    },
    redraw,
    schedule,
    // Back to the first row (a filter changed what is listed).
    toTop() {
      scrollTop = 0;
      scroller.scrollTop = 0;
    },
  };
}
