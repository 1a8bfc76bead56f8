#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

#include "kernels.h"

static int to_doubles(PyObject *seq, double **out, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of numbers");
    if (fast == NULL) {
        return -1;
    }
    *n = PySequence_Fast_GET_SIZE(fast);
    *out = malloc(sizeof(double) * (size_t)(*n ? *n : 1));
    if (*out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        (*out)[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
    }
    Py_DECREF(fast);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *dot(PyObject *self, PyObject *args) {
    PyObject *a_obj, *b_obj;
    double *a = NULL, *b = NULL;
    Py_ssize_t na = 0, nb = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &a_obj, &b_obj)) {
        return NULL;
    }
    if (to_doubles(a_obj, &a, &na) < 0 || to_doubles(b_obj, &b, &nb) < 0) {
        free(a);
        free(b);
        return NULL;
    }
    double r = vllm_musa_dot(a, b, (size_t)(na < nb ? na : nb));
    free(a);
    free(b);
    return PyFloat_FromDouble(r);
}

static PyObject *available(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"dot", dot, METH_VARARGS, "dot product (demo kernel)"},
    {"available", available, METH_NOARGS, "whether the kernels loaded"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "vllm_musa._C", NULL, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
