/* The fast path's hit in C: the call-site check (ops.route._site_hit_py) and a stored call's output
 * allocation and launch (fastpath._plain_run over runtime.prebind's launch), without their bytecode.
 *
 * An eager call that finds the CPU's caches cold (as one after a synchronisation does) pays for every
 * frame and bytecode of its Python: on the H100's hosts the Python hit cost a few microseconds more
 * than these functions, which call the same Python and C callables in the same order and return the
 * same results. ops/route.py, fastpath.py and runtime.py hold the references, the layouts and the fallbacks.
 *
 * site_hit(site, tensors) -> the entry of the first candidate that tensors match, or None.
 *   site: list of candidates (n, present, vacant, check, align, precision, entry)
 *   tensors: tuple of the call's tensor arguments (None where absent); a nested one matches nothing
 *   (torch's tensor guard aborts the process reading its strides), nor one at an address below
 *   LIVE_ADDRESS unless its candidate's was (freed storage: see ops.route.address_bits)
 * run(state, tensors) -> the output: allocated, then written by one direct launch of a compiled kernel.
 *   state: (new, shape, stride, launch, current_device, index, stream_of, hooks, address, memo, encode,
 *           scratch_address, nbytes, c_launch, g0, g1, g2, function, coop, pdl, metadata)
 * configure(address, precision, offset, itemsize): Tensor.data_ptr, config.fp32_precision,
 *   Tensor.storage_offset and Tensor.element_size, for site_hit.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *address_fn = NULL;   /* Tensor.data_ptr */
static PyObject *offset_fn = NULL;    /* Tensor.storage_offset */
static PyObject *itemsize_fn = NULL;  /* Tensor.element_size */
static PyObject *precision_fn = NULL; /* config.fp32_precision */
static PyObject *nested_name = NULL;  /* "is_nested" */

/* No live allocation lies below it (Linux's mmap_min_addr; CUDA's addresses are far above): a tensor
 * whose storage starts there is one whose storage was freed (data pointer 0 plus its offset), or an
 * empty one. ops.route.LIVE_ADDRESS. */
#define LIVE_ADDRESS (1ULL << 16)
/* Below it a data pointer may be a freed view's offset in bytes: the storage's start is computed.
 * ops.route.BASE_CHECKED_BELOW. */
#define BASE_CHECKED_BELOW (1ULL << 44)

/* A Python int result of fn(t) as a C integer; -1 with an exception set. */
static long long int_of(PyObject *fn, PyObject *t) {
    PyObject *r = PyObject_CallOneArg(fn, t);
    if (r == NULL)
        return -1;
    long long v = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return v;
}

/* ops.route.address_bits of tensor t at data pointer `address`: 0..15, or 16 for storage that
 * starts below LIVE_ADDRESS (freed or empty); -1 with an exception set. */
static long long address_bits(PyObject *t, unsigned long long address) {
    if (address < BASE_CHECKED_BELOW) {
        long long offset = int_of(offset_fn, t), size;
        if (offset == -1 && PyErr_Occurred())
            return -1;
        size = int_of(itemsize_fn, t);
        if (size == -1 && PyErr_Occurred())
            return -1;
        if (address - (unsigned long long)offset * (unsigned long long)size < LIVE_ADDRESS)
            return 16;
    }
    return (long long)(address & 15);
}

/* Whether obj is truthy: 1, 0, or -1 with an exception set. Steals the reference. */
static int truth(PyObject *obj) {
    if (obj == NULL)
        return -1;
    int r = PyObject_IsTrue(obj);
    Py_DECREF(obj);
    return r;
}

/* 1 if the tensors of `given` have the candidate's alignment (`align`: None = all 16-byte aligned and
 * live, else a tuple of each address's ops.route.address_bits), 0 if not, -1 with an exception set. */
static int aligned(PyObject *given, PyObject *align) {
    Py_ssize_t n = PyTuple_GET_SIZE(given);
    if (align != Py_None && PyTuple_GET_SIZE(align) != n)
        return 0;
    unsigned long long bits = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *p = PyObject_CallOneArg(address_fn, PyTuple_GET_ITEM(given, j));
        if (p == NULL)
            return -1;
        unsigned long long address = PyLong_AsUnsignedLongLongMask(p);
        Py_DECREF(p);
        if (PyErr_Occurred())
            return -1;
        long long low = address_bits(PyTuple_GET_ITEM(given, j), address);
        if (low < 0)
            return -1;
        if (align == Py_None)
            bits |= (unsigned long long)low;
        else if ((unsigned long long)low != PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(align, j)))
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
    /* One flag per tensor before any guard reads it: torch's guard aborts on a nested tensor's strides. */
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(tensors); j++) {
        PyObject *t = PyTuple_GET_ITEM(tensors, j);
        if (t == Py_None)
            continue;
        PyObject *nested = PyObject_GetAttr(t, nested_name);
        if (nested == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return NULL;
            PyErr_Clear(); /* not a tensor: no candidate matches it, the call's checks say why */
            Py_RETURN_NONE;
        }
        Py_DECREF(nested);
        if (nested != Py_False)
            Py_RETURN_NONE;
    }
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
    PyObject *address, *precision, *offset, *itemsize;
    if (!PyArg_ParseTuple(args, "OOOO", &address, &precision, &offset, &itemsize))
        return NULL;
    Py_INCREF(address);
    Py_INCREF(precision);
    Py_INCREF(offset);
    Py_INCREF(itemsize);
    Py_XSETREF(address_fn, address);
    Py_XSETREF(precision_fn, precision);
    Py_XSETREF(offset_fn, offset);
    Py_XSETREF(itemsize_fn, itemsize);
    if (nested_name == NULL && (nested_name = PyUnicode_InternFromString("is_nested")) == NULL)
        return NULL;
    Py_RETURN_NONE;
}

/* Whether a Triton launch hook chain (knobs.runtime's launch_enter_hook or launch_exit_hook) would be
 * called: runtime.prebind's launch passes an empty chain as None. 1, 0, or -1 with an exception set. */
static int hook_active(PyObject *hooks, const char *name) {
    PyObject *chain = PyObject_GetAttrString(hooks, name);
    if (chain == NULL)
        return -1;
    if (chain == Py_None) {
        Py_DECREF(chain);
        return 0;
    }
    PyObject *calls = PyObject_GetAttrString(chain, "calls");
    Py_DECREF(chain);
    if (calls == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear(); /* not a chain: a hook, which is called */
        return 1;
    }
    return truth(calls);
}

enum { S_NEW, S_SHAPE, S_STRIDE, S_LAUNCH, S_DEVICE, S_INDEX, S_STREAM_OF, S_HOOKS, S_ADDRESS, S_MEMO, S_ENCODE,
       S_SCRATCH, S_NBYTES, S_C_LAUNCH, S_G0, S_G1, S_G2, S_FUNCTION, S_COOP, S_PDL, S_METADATA, S_LEN };

/* The kernel arguments for these tensors' addresses: the memo's, or encode(all, ptrs)'s. New reference. */
static PyObject *kernel_arguments(PyObject *const *state, PyObject *all) {
    Py_ssize_t n = PyTuple_GET_SIZE(all);
    PyObject *ptrs = PyTuple_New(n);
    if (ptrs == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *p = PyObject_CallOneArg(state[S_ADDRESS], PyTuple_GET_ITEM(all, j));
        if (p == NULL) {
            Py_DECREF(ptrs);
            return NULL;
        }
        PyTuple_SET_ITEM(ptrs, j, p);
    }
    PyObject *found = PyDict_GetItemWithError(state[S_MEMO], ptrs); /* borrowed */
    PyObject *arguments;
    if (found != NULL) {
        Py_INCREF(found);
        arguments = found;
    } else if (PyErr_Occurred()) {
        arguments = NULL;
    } else {
        PyObject *call[2] = {all, ptrs};
        arguments = PyObject_Vectorcall(state[S_ENCODE], call, 2, NULL);
    }
    Py_DECREF(ptrs);
    if (arguments != NULL && !PyTuple_Check(arguments)) {
        Py_DECREF(arguments);
        PyErr_SetString(PyExc_TypeError, "run: kernel arguments must be a tuple");
        return NULL;
    }
    return arguments;
}

/* The direct launch of runtime.prebind's launch: c_launch(g0, g1, g2, stream, function, coop, pdl,
 * scratch, None, metadata, None, None, None, *arguments). 0, or -1 with an exception set. */
static int direct_launch(PyObject *const *state, PyObject *all, PyObject *stream) {
    PyObject *arguments = kernel_arguments(state, all);
    if (arguments == NULL)
        return -1;
    PyObject *scratch = Py_None;
    Py_INCREF(scratch);
    if (PyObject_IsTrue(state[S_NBYTES])) {
        PyObject *call[3] = {state[S_INDEX], stream, state[S_NBYTES]};
        Py_DECREF(scratch);
        scratch = PyObject_Vectorcall(state[S_SCRATCH], call, 3, NULL);
        if (scratch == NULL) {
            Py_DECREF(arguments);
            return -1;
        }
    }
    Py_ssize_t na = PyTuple_GET_SIZE(arguments);
    PyObject **call = PyMem_Malloc((13 + na) * sizeof(PyObject *));
    if (call == NULL) {
        Py_DECREF(arguments);
        Py_DECREF(scratch);
        PyErr_NoMemory();
        return -1;
    }
    PyObject *head[13] = {state[S_G0], state[S_G1], state[S_G2], stream, state[S_FUNCTION], state[S_COOP],
                          state[S_PDL], scratch, Py_None, state[S_METADATA], Py_None, Py_None, Py_None};
    for (int j = 0; j < 13; j++)
        call[j] = head[j];
    for (Py_ssize_t j = 0; j < na; j++)
        call[13 + j] = PyTuple_GET_ITEM(arguments, j);
    PyObject *r = PyObject_Vectorcall(state[S_C_LAUNCH], call, 13 + na, NULL);
    PyMem_Free(call);
    Py_DECREF(arguments);
    Py_DECREF(scratch);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Launch on all = (*tensors, out): directly where runtime.prebind's launch would, else through it. */
static int launch(PyObject *const *state, PyObject *all) {
    PyObject *device = PyObject_CallNoArgs(state[S_DEVICE]);
    if (device == NULL)
        return -1;
    int here = PyObject_RichCompareBool(device, state[S_INDEX], Py_EQ);
    Py_DECREF(device);
    if (here < 0)
        return -1;
    int hooked = 0;
    if (here) {
        hooked = hook_active(state[S_HOOKS], "launch_enter_hook");
        if (hooked == 0)
            hooked = hook_active(state[S_HOOKS], "launch_exit_hook");
        if (hooked < 0)
            return -1;
    }
    if (!here || hooked) { /* another current device, or hooks to call: the Python launch handles both */
        PyObject *r = PyObject_Call(state[S_LAUNCH], all, NULL);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    PyObject *stream = PyObject_CallOneArg(state[S_STREAM_OF], state[S_INDEX]);
    if (stream == NULL)
        return -1;
    int rc = direct_launch(state, all, stream);
    Py_DECREF(stream);
    return rc;
}

static PyObject *run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != S_LEN || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "run(state: 21-tuple, tensors: tuple)");
        return NULL;
    }
    PyObject *const *state = ((PyTupleObject *)args[0])->ob_item;
    PyObject *tensors = args[1];
    PyObject *shape_stride[2] = {state[S_SHAPE], state[S_STRIDE]};
    PyObject *out = PyObject_Vectorcall(state[S_NEW], shape_stride, 2, NULL);
    if (out == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(tensors);
    PyObject *all = PyTuple_New(n + 1);
    if (all == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *t = PyTuple_GET_ITEM(tensors, j);
        Py_INCREF(t);
        PyTuple_SET_ITEM(all, j, t);
    }
    Py_INCREF(out);
    PyTuple_SET_ITEM(all, n, out);
    int rc = launch(state, all);
    Py_DECREF(all);
    if (rc < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"site_hit", (PyCFunction)(void (*)(void))site_hit, METH_FASTCALL, "The entry of the first matching candidate, or None."},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, "A stored call's output, allocated and written by its launch."},
    {"configure", configure, METH_VARARGS, "configure(address, precision, offset, itemsize)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "alcop_fastpath_native", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_alcop_fastpath_native(void) { return PyModule_Create(&module); }
