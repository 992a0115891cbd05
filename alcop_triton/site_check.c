/* The fast path's call-site check in C: fastpath._site_hit_py, without its bytecode.
 *
 * An eager call that finds the CPU's caches cold (as one after a synchronisation does) pays for every
 * frame and bytecode of its Python: this check, written in Python, cost about a microsecond more
 * than here on such calls. It calls the same Python and C callables as the Python version (the
 * candidate's guard check, its pickers, Tensor.data_ptr, the float32 precision getter), in the same
 * order, and returns the same entry. fastpath.py holds the reference and the candidates' layout.
 *
 * site_hit(site, tensors) -> the entry of the first candidate that tensors match, or None.
 *   site: list of candidates (n, present, vacant, check, align, precision, entry)
 *   tensors: tuple of the call's tensor arguments (None where absent)
 * configure(address, precision): Tensor.data_ptr and config.fp32_precision, called on every check.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *address_fn = NULL;   /* Tensor.data_ptr */
static PyObject *precision_fn = NULL; /* config.fp32_precision */

/* Whether obj is truthy: 1, 0, or -1 with an exception set. Steals the reference. */
static int truth(PyObject *obj) {
    if (obj == NULL)
        return -1;
    int r = PyObject_IsTrue(obj);
    Py_DECREF(obj);
    return r;
}

/* 1 if the tensors of `given` have the candidate's alignment (`align`: None = all 16-byte aligned,
 * else a tuple of each address's low four bits), 0 if not, -1 with an exception set. */
static int aligned(PyObject *given, PyObject *align) {
    Py_ssize_t n = PyTuple_GET_SIZE(given);
    if (align != Py_None && PyTuple_GET_SIZE(align) != n)
        return 0;
    unsigned long long bits = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *p = PyObject_CallOneArg(address_fn, PyTuple_GET_ITEM(given, j));
        if (p == NULL)
            return -1;
        unsigned long long low = PyLong_AsUnsignedLongLongMask(p) & 15;
        Py_DECREF(p);
        if (PyErr_Occurred())
            return -1;
        if (align == Py_None)
            bits |= low;
        else if (low != PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(align, j)))
            return 0;
    }
    return bits == 0;
}

/* 1 if the candidate `c` matches, 0 if not, -1 with an exception set. */
static int matches(PyObject *c, PyObject *tensors) {
    if (PyLong_AsSsize_t(PyTuple_GET_ITEM(c, 0)) != PyTuple_GET_SIZE(tensors))
        return PyErr_Occurred() ? -1 : 0;
    PyObject *present = PyTuple_GET_ITEM(c, 1), *given;
    if (present == Py_None) {
        given = tensors;
        Py_INCREF(given);
    } else {
        int vacant = truth(PyObject_CallOneArg(PyTuple_GET_ITEM(c, 2), tensors));
        if (vacant <= 0)
            return vacant;
        given = PyObject_CallOneArg(present, tensors);
        if (given == NULL)
            return -1;
        if (!PyTuple_Check(given)) {
            Py_DECREF(given);
            PyErr_SetString(PyExc_TypeError, "site_hit: a candidate's picker must return a tuple");
            return -1;
        }
    }
    int ok = truth(PyObject_Call(PyTuple_GET_ITEM(c, 3), given, NULL));
    PyObject *precision = PyTuple_GET_ITEM(c, 5);
    if (ok > 0 && precision != Py_None) {
        PyObject *now = PyObject_CallNoArgs(precision_fn);
        ok = now == NULL ? -1 : PyObject_RichCompareBool(now, precision, Py_EQ);
        Py_XDECREF(now);
    }
    if (ok > 0)
        ok = aligned(given, PyTuple_GET_ITEM(c, 4));
    Py_DECREF(given);
    return ok;
}

static PyObject *site_hit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "site_hit(site: list, tensors: tuple)");
        return NULL;
    }
    if (address_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "site_hit: configure() was not called");
        return NULL;
    }
    PyObject *site = args[0], *tensors = args[1];
    /* The list may change while a candidate's callables run (another thread adds one): index it afresh. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(site); i++) {
        PyObject *c = PyList_GET_ITEM(site, i);
        if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) != 7) {
            PyErr_SetString(PyExc_TypeError, "site_hit: a candidate must be a 7-tuple");
            return NULL;
        }
        Py_INCREF(c);
        int m = matches(c, tensors);
        if (m != 0) {
            PyObject *entry = m > 0 ? PyTuple_GET_ITEM(c, 6) : NULL;
            Py_XINCREF(entry);
            Py_DECREF(c);
            return entry;
        }
        Py_DECREF(c);
    }
    Py_RETURN_NONE;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *address, *precision;
    if (!PyArg_ParseTuple(args, "OO", &address, &precision))
        return NULL;
    Py_INCREF(address);
    Py_INCREF(precision);
    Py_XSETREF(address_fn, address);
    Py_XSETREF(precision_fn, precision);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"site_hit", (PyCFunction)(void (*)(void))site_hit, METH_FASTCALL, "The entry of the first matching candidate, or None."},
    {"configure", configure, METH_VARARGS, "configure(address, precision)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "alcop_site_check", NULL, -1, methods};

PyMODINIT_FUNC PyInit_alcop_site_check(void) { return PyModule_Create(&module); }
