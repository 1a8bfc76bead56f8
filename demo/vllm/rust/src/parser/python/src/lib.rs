//! Demo stand-in for vLLM's tool parser module (`vllm._rust_tool_parser`, PyO3 in vLLM): an
//! extension module with a docstring and no functions, written against CPython's stable ABI by
//! hand, because PyO3 comes from crates.io, which the demo does not reach.

use std::os::raw::{c_char, c_int, c_void};
use std::ptr::{addr_of_mut, null_mut};

#[repr(C)]
pub struct PyModuleDefBase {
    ob_refcnt: isize,
    ob_type: *mut c_void,
    m_init: *mut c_void,
    m_index: isize,
    m_copy: *mut c_void,
}

#[repr(C)]
pub struct PyModuleDef {
    m_base: PyModuleDefBase,
    m_name: *const c_char,
    m_doc: *const c_char,
    m_size: isize,
    m_methods: *mut c_void,
    m_slots: *mut c_void,
    m_traverse: *mut c_void,
    m_clear: *mut c_void,
    m_free: *mut c_void,
}

extern "C" {
    fn PyModule_Create2(def: *mut PyModuleDef, api_version: c_int) -> *mut c_void;
}

const PYTHON_ABI_VERSION: c_int = 3;

static mut MODULE: PyModuleDef = PyModuleDef {
    m_base: PyModuleDefBase {
        ob_refcnt: 1,
        ob_type: null_mut(),
        m_init: null_mut(),
        m_index: 0,
        m_copy: null_mut(),
    },
    m_name: b"_rust_tool_parser\0".as_ptr() as *const c_char,
    m_doc: b"demo stand-in for vLLM's Rust tool parser\0".as_ptr() as *const c_char,
    m_size: -1,
    m_methods: null_mut(),
    m_slots: null_mut(),
    m_traverse: null_mut(),
    m_clear: null_mut(),
    m_free: null_mut(),
};

/// # Safety
/// Called once by the interpreter, holding the GIL, when the module is imported.
#[no_mangle]
pub unsafe extern "C" fn PyInit__rust_tool_parser() -> *mut c_void {
    PyModule_Create2(addr_of_mut!(MODULE), PYTHON_ABI_VERSION)
}
