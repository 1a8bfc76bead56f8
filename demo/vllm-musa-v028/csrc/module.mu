// vllm_musa._C (stand-in): the Python module over the functions of gemm.mu and norm.mu.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

#include "kernels.h"

// A new array of the floats of a sequence, or NULL with an exception set.
static double *to_doubles(PyObject *seq, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of numbers");
    if (fast == NULL) {
        return NULL;
    }
    *n = PySequence_Fast_GET_SIZE(fast);
    double *out = malloc(sizeof(double) * (size_t)(*n ? *n : 1));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        out[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
    }
    Py_DECREF(fast);
    if (PyErr_Occurred()) {
        free(out);
        return NULL;
    }
    return out;
}

static PyObject *dot(PyObject *self, PyObject *args) {
    PyObject *a_obj, *b_obj;
    Py_ssize_t na = 0, nb = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &a_obj, &b_obj)) {
        return NULL;
    }
    double *a = to_doubles(a_obj, &na);
    double *b = a ? to_doubles(b_obj, &nb) : NULL;
    if (b == NULL) {
        free(a);
        return NULL;
    }
    PyObject *result = NULL;
    if (na != nb) {
        PyErr_SetString(PyExc_ValueError, "dot: the sequences differ in length");
    } else {
        result = PyFloat_FromDouble(vllm_musa_dot(a, b, (size_t)na));
    }
    free(a);
    free(b);
    return result;
}

static PyObject *sum_squares(PyObject *self, PyObject *arg) {
    Py_ssize_t n = 0;
    (void)self;
    double *x = to_doubles(arg, &n);
    if (x == NULL) {
        return NULL;
    }
    double r = vllm_musa_sum_squares(x, (size_t)n);
    free(x);
    return PyFloat_FromDouble(r);
}

static PyObject *fp8_enabled(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
#ifdef ENABLE_FP8
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"dot", dot, METH_VARARGS, "The dot product of two sequences of floats."},
    {"sum_squares", sum_squares, METH_O, "The sum of the squares of a sequence of floats."},
    {"fp8_enabled", fp8_enabled, METH_NOARGS, "Whether ENABLE_FP8 was set (mp_31)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "vllm_musa._C", NULL, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
