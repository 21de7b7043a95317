/* The learner's per-step push of new Atari frames onto packed 4-frame
 * stacks, in one pass (common/env_state.py's EnvStateTable).
 *
 * A packed stack is one little-endian uint32 per pixel whose high byte is
 * the newest frame, so pushing a frame is `word = word >> 8 | frame << 24`.
 * NumPy needs three passes over the 28 KB of every stack for it (the
 * shift, a strided byte write of the frame, a copy into the inference
 * batch); here each word is read once and written to the table and, when
 * asked, to the batch. One call takes every run of consecutive envs of an
 * inference call and releases the GIL once for all of them, so the gRPC
 * handler thread goes on meanwhile without a hand-over per run.
 *
 * Built by setup.py as an optional extension: where no C compiler is
 * found the package installs without it and env_state.py keeps NumPy's
 * passes, which give the same bytes (tests/common/test_env_state.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static void push_words(uint32_t *restrict words, const uint8_t *restrict frames,
                       uint32_t *restrict out, Py_ssize_t n) {
  if (out) {
    for (Py_ssize_t i = 0; i < n; i++) {
      uint32_t w = (words[i] >> 8) | ((uint32_t)frames[i] << 24);
      words[i] = w;
      out[i] = w;
    }
  } else {
    for (Py_ssize_t i = 0; i < n; i++)
      words[i] = (words[i] >> 8) | ((uint32_t)frames[i] << 24);
  }
}

static int aligned(const Py_buffer *b) {
  return ((uintptr_t)b->buf & (sizeof(uint32_t) - 1)) == 0;
}

PyDoc_STRVAR(push_runs_doc,
  "push_runs(words, frames, out, runs, hw)\n\n"
  "Pushes the frames of an inference call onto their envs' packed stacks.\n"
  "words: the table, [N, hw] uint32 (C-contiguous, 4-byte aligned), written\n"
  "in place; frames: [B, hw] uint8; out: None or [B, hw] uint32, the new\n"
  "stacks in the rows of `frames`; runs: int64 [R, 3] of (lo, hi, first):\n"
  "frames rows [lo, hi) belong to table rows [first, first + hi - lo).\n"
  "Every run is checked before anything is written; one release of the\n"
  "GIL covers them all. Little-endian layout, as EnvStateTable packs it.");

/* Checks every run against the table's and the batch's rows; sets a
 * ValueError naming the first that does not fit. */
static int check_runs(const int64_t *runs, Py_ssize_t num_runs, int64_t rows,
                      int64_t table_rows) {
  for (Py_ssize_t r = 0; r < num_runs; r++) {
    int64_t lo = runs[3 * r], hi = runs[3 * r + 1], first = runs[3 * r + 2];
    if (lo < 0 || hi < lo || hi > rows || first < 0 ||
        first > table_rows - (hi - lo)) {
      PyErr_Format(PyExc_ValueError,
                   "run %zd (lo %lld, hi %lld, first %lld) does not fit: "
                   "0 <= lo <= hi <= %lld frames and first + hi - lo <= %lld "
                   "table rows",
                   r, (long long)lo, (long long)hi, (long long)first,
                   (long long)rows, (long long)table_rows);
      return -1;
    }
  }
  return 0;
}

static PyObject *push_runs(PyObject *self, PyObject *args) {
  Py_buffer words, frames, runs, out = {0};
  PyObject *out_arg, *result = NULL;
  Py_ssize_t hw;
  (void)self;
  if (!PyArg_ParseTuple(args, "w*y*Oy*n", &words, &frames, &out_arg, &runs,
                        &hw))
    return NULL;
  if (out_arg != Py_None &&
      PyObject_GetBuffer(out_arg, &out, PyBUF_WRITABLE) < 0) {
    /* the exception names what was wrong; out.obj is NULL */
  } else if (hw <= 0 || frames.len % hw || words.len % (4 * hw)) {
    PyErr_Format(PyExc_ValueError,
                 "hw (%zd pixels per frame) must be > 0 and divide the "
                 "frames (%zd bytes) and the table (%zd bytes / 4)",
                 hw, frames.len, words.len);
  } else if (out.obj && out.len != 4 * frames.len) {
    PyErr_Format(PyExc_ValueError,
                 "out must hold 4 bytes per frame byte: %zd bytes for %zd",
                 out.len, frames.len);
  } else if (runs.len % (3 * sizeof(int64_t)) ||
             ((uintptr_t)runs.buf & (sizeof(int64_t) - 1))) {
    PyErr_Format(PyExc_ValueError,
                 "runs must be aligned int64 triples (lo, hi, first): %zd "
                 "bytes", runs.len);
  } else if (!aligned(&words) || (out.obj && !aligned(&out))) {
    PyErr_SetString(PyExc_ValueError, "words and out must be 4-byte aligned");
  } else {
    const int64_t *r = (const int64_t *)runs.buf;
    Py_ssize_t num_runs = runs.len / (Py_ssize_t)(3 * sizeof(int64_t));
    if (check_runs(r, num_runs, frames.len / hw, words.len / (4 * hw)) == 0) {
      uint32_t *table = (uint32_t *)words.buf;
      const uint8_t *f = (const uint8_t *)frames.buf;
      uint32_t *o = out.obj ? (uint32_t *)out.buf : NULL;
      Py_BEGIN_ALLOW_THREADS
      for (Py_ssize_t i = 0; i < num_runs; i++) {
        int64_t lo = r[3 * i], hi = r[3 * i + 1], first = r[3 * i + 2];
        push_words(table + first * hw, f + lo * hw, o ? o + lo * hw : NULL,
                   (hi - lo) * hw);
      }
      Py_END_ALLOW_THREADS
      result = Py_NewRef(Py_None);
    }
  }
  PyBuffer_Release(&words);
  PyBuffer_Release(&frames);
  PyBuffer_Release(&runs);
  if (out.obj) PyBuffer_Release(&out);
  return result;
}

static PyMethodDef methods[] = {
  {"push_runs", push_runs, METH_VARARGS, push_runs_doc},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
  PyModuleDef_HEAD_INIT, "_frame_push",
  "One-pass push of Atari frames onto packed 4-frame stacks.", -1, methods,
};

PyMODINIT_FUNC PyInit__frame_push(void) { return PyModule_Create(&module); }
