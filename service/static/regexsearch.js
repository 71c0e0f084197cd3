// The map search's regular expression, tested on every label in a worker rather than on the page's thread: an
// expression that backtracks for minutes on a label (/(a+)+$/ over "aaaa…a!") stalls this worker, which the page
// stops after its time budget, never the tab.

let labels = [];

onmessage = ({ data }) => {
  if (data.labels) {
    labels = data.labels;
    return;
  }
  const re = new RegExp(data.source, data.flags);
  const found = [];
  for (let i = 0; i < data.rows; i++) if (re.test(labels[i])) found.push(i);
  const rows = Int32Array.from(found);
  postMessage({ rows }, [rows.buffer]);
};
