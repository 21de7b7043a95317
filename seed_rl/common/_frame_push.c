/* The learner's per-step push of new Atari frames onto packed 4-frame
 * stacks, in one pass (common/env_state.py's EnvStateTable).
 *
 * A packed stack is one little-endian uint32 per pixel whose high byte is
 * the newest frame, so pushing a frame is `word = word >> 8 | frame << 24`.
 * NumPy needs three passes over the 28 KB of every stack for it (the
 * shift, a strided byte write of the frame, a copy into the inference
 * batch); here each word is read once and written to the table and, when
 * asked, to the batch. The GIL is released for the pass, so the gRPC
 * handler thread goes on meanwhile.
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

PyDoc_STRVAR(push_doc,
  "push(words, frames, out=None)\n\n"
  "Pushes `frames` (n bytes, C-contiguous) onto the packed stacks `words`\n"
  "(4n bytes, C-contiguous, 4-byte aligned, written in place) and, when\n"
  "`out` is given (4n bytes, the same layout), writes the new stacks there\n"
  "too. Little-endian layout, as EnvStateTable packs it.");

static PyObject *push(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *keywords[] = {"words", "frames", "out", NULL};
  Py_buffer words, frames, out = {0};
  PyObject *out_arg = Py_None, *result = NULL;
  (void)self;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "w*y*|O", keywords, &words,
                                   &frames, &out_arg))
    return NULL;
  if (out_arg != Py_None &&
      PyObject_GetBuffer(out_arg, &out, PyBUF_WRITABLE) < 0) {
    /* the exception names what was wrong; out.obj is NULL */
  } else if (words.len != 4 * frames.len) {
    PyErr_Format(PyExc_ValueError,
                 "words must hold 4 bytes per frame byte: %zd bytes of words "
                 "for %zd bytes of frames",
                 words.len, frames.len);
  } else if (out.obj && out.len != words.len) {
    PyErr_Format(PyExc_ValueError,
                 "out must be as large as words: %zd bytes against %zd",
                 out.len, words.len);
  } else if (!aligned(&words) || (out.obj && !aligned(&out))) {
    PyErr_SetString(PyExc_ValueError,
                    "words and out must be 4-byte aligned");
  } else {
    Py_BEGIN_ALLOW_THREADS
    push_words((uint32_t *)words.buf, (const uint8_t *)frames.buf,
               out.obj ? (uint32_t *)out.buf : NULL, frames.len);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
  }
  PyBuffer_Release(&words);
  PyBuffer_Release(&frames);
  if (out.obj) PyBuffer_Release(&out);
  return result;
}

static PyMethodDef methods[] = {
  {"push", (PyCFunction)(void (*)(void))push, METH_VARARGS | METH_KEYWORDS,
   push_doc},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
  PyModuleDef_HEAD_INIT, "_frame_push",
  "One-pass push of Atari frames onto packed 4-frame stacks.", -1, methods,
};

PyMODINIT_FUNC PyInit__frame_push(void) { return PyModule_Create(&module); }
