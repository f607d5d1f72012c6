// tensormorph._native: the Python client's compiled read. A ReadSlice
// received by the C++ client (tensormorph::Client) straight into a buffer
// the Python side allocates from the header (a numpy array, through the
// buffer protocol), with the GIL released while bytes arrive: grpcio
// copies each reply twice more and holds the GIL for it
// (tests/bench/NOTES.md). The Python side (tensormorph/_native_read.py)
// makes the request, parses the header and shapes the array, so both of
// its read paths share everything but the transport.
//
//   reader = _native.connect(target, token, tls_ca, tls_cert, tls_key,
//                            timeout)   # PEM bytes ("" none); seconds, inf
//   reader.read(request, alloc)  # request: a serialized ReadSliceRequest;
//                                # alloc(header bytes) -> a writable buffer
//                                # of header.total_bytes
// Errors raise _native.CallError(code, message, reason, metadata,
// attached): the absl code's name ("NOT_FOUND"), the message, the reason
// (ErrorReasonOf), its metadata (a dict) and whether the server attached
// the reason (else it is the code's generic one); _native.ERROR_DOMAIN is
// the domain of the server's reasons. An exception alloc
// raises, and KeyboardInterrupt (checked every 50 ms while the read runs;
// it cancels the call), propagate as they are.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/python/native/slice_into_buffer.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

PyObject* g_call_error = nullptr;  // _native.CallError

// The GIL released for a scope (Py_BEGIN_ALLOW_THREADS as an object).
class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) {}
  ~GilReleased() { PyEval_RestoreThread(state_); }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* state_;
};

// Raises CallError for `status` (not OK); returns nullptr for the caller
// to return.
PyObject* RaiseCallError(const absl::Status& status) {
  PyObject* metadata = PyDict_New();
  if (metadata == nullptr) return nullptr;
  for (const auto& [key, value] : ErrorMetadataOf(status)) {
    PyObject* v = PyUnicode_DecodeUTF8(value.data(), value.size(), "replace");
    if (v == nullptr || PyDict_SetItemString(metadata, key.c_str(), v) != 0) {
      Py_XDECREF(v);
      Py_DECREF(metadata);
      return nullptr;
    }
    Py_DECREF(v);
  }
  // A message quotes names out of files: not always UTF-8.
  PyObject* message = PyUnicode_DecodeUTF8(status.message().data(),
                                           status.message().size(), "replace");
  if (message == nullptr) {
    Py_DECREF(metadata);
    return nullptr;
  }
  const std::string code = absl::StatusCodeToString(status.code());
  const std::string reason = ErrorReasonOf(status);
  const bool attached = !AttachedReasonOf(status).empty();
  PyObject* args = Py_BuildValue(
      "(s#Ns#NO)", code.data(), static_cast<Py_ssize_t>(code.size()), message,
      reason.data(), static_cast<Py_ssize_t>(reason.size()), metadata,
      attached ? Py_True : Py_False);
  if (args != nullptr) {
    PyErr_SetObject(g_call_error, args);
    Py_DECREF(args);
  }
  return nullptr;
}

// _native.Reader: one C++ Client (made by connect(), placed in the object).
struct ReaderObject {
  PyObject ob_base;  // PyObject_HEAD
  std::unique_ptr<Client> client;
  // The process that made it. A fork()ed child shares its connections'
  // sockets and has none of gRPC's threads: using the client there would
  // corrupt the parent's streams, destroying it could wait forever.
  pid_t owner;
};

void ReaderDealloc(PyObject* self) {
  auto* r = reinterpret_cast<ReaderObject*>(self);
  std::unique_ptr<Client> client = std::move(r->client);
  r->client.~unique_ptr<Client>();
  if (getpid() != r->owner) {
    (void)client.release();  // a fork()ed child's copy: left alone
  } else {
    GilReleased unlocked;
    client.reset();  // closes its channels: may block
  }
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);  // a heap type: each instance holds a reference
}

// What one read's allocate callback shares with the thread that waits:
// the buffer exported by the object alloc returned, and an exception it
// raised. Touched by the read's thread under the GIL, then by the waiting
// thread after Join.
struct Destination {
  PyObject* alloc = nullptr;   // borrowed: the caller's argument
  PyObject* target = nullptr;  // alloc's result (owned)
  Py_buffer view{};            // exported by target when `exported`
  bool exported = false;
  PyObject *error_type = nullptr, *error_value = nullptr, *error_tb = nullptr;

  // On the read's thread: calls alloc with the header, takes its buffer.
  bool Allocate(const v1::SliceHeader& header, absl::Span<char>* out) {
    const std::string bytes = header.SerializeAsString();
    PyGILState_STATE gil = PyGILState_Ensure();
    target = PyObject_CallFunction(alloc, "y#", bytes.data(),
                                   static_cast<Py_ssize_t>(bytes.size()));
    if (target != nullptr &&
        PyObject_GetBuffer(target, &view, PyBUF_CONTIG) == 0) {
      exported = true;
      if (view.len != header.total_bytes()) {
        PyErr_Format(PyExc_ValueError,
                     "alloc returned %zd bytes for a slice of %lld", view.len,
                     static_cast<long long>(header.total_bytes()));
      }
    }
    const bool ok = !PyErr_Occurred();
    if (!ok) PyErr_Fetch(&error_type, &error_value, &error_tb);
    PyGILState_Release(gil);
    if (ok) *out = absl::Span<char>(static_cast<char*>(view.buf), view.len);
    return ok;
  }

  // With the GIL, after the read ended.
  void Release() {
    if (exported) PyBuffer_Release(&view);
    exported = false;
    Py_CLEAR(target);
  }
  void DropError() {
    Py_CLEAR(error_type);
    Py_CLEAR(error_value);
    Py_CLEAR(error_tb);
  }
};

// Waits for `read` with the GIL released, 50 ms at a time, running
// Python's signal handlers between waits; false when one raised
// (KeyboardInterrupt), the read then cancelled.
bool WaitInterruptibly(SliceIntoBuffer& read) {
  constexpr absl::Duration kSignalCheck = absl::Milliseconds(50);
  for (;;) {
    {
      GilReleased unlocked;
      if (read.Wait(kSignalCheck)) return true;
    }
    if (PyErr_CheckSignals() != 0) {
      read.Cancel();
      return false;
    }
  }
}

PyObject* ReaderRead(PyObject* self, PyObject* args) {
  const char* request_bytes;
  Py_ssize_t request_size;
  Destination dest;
  if (!PyArg_ParseTuple(args, "y#O:read", &request_bytes, &request_size,
                        &dest.alloc)) {
    return nullptr;
  }
  v1::ReadSliceRequest request;
  if (!request.ParseFromArray(request_bytes, static_cast<int>(request_size))) {
    PyErr_SetString(PyExc_ValueError, "not a serialized ReadSliceRequest");
    return nullptr;
  }
  auto* reader = reinterpret_cast<ReaderObject*>(self);
  if (getpid() != reader->owner) {
    PyErr_SetString(PyExc_RuntimeError,
                    "a Reader cannot be used in a fork()ed child");
    return nullptr;
  }
  Client* client = reader->client.get();
  std::unique_ptr<SliceIntoBuffer> read = SliceIntoBuffer::Start(
      client, std::move(request),
      [&dest](const v1::SliceHeader& h, absl::Span<char>* out) {
        return dest.Allocate(h, out);
      });
  const bool uninterrupted = WaitInterruptibly(*read);
  absl::Status status;
  {
    GilReleased unlocked;
    status = read->Join();
  }
  dest.Release();
  if (!uninterrupted) {  // KeyboardInterrupt is set: it wins
    dest.DropError();
    return nullptr;
  }
  if (dest.error_type != nullptr) {  // alloc raised: the read was cancelled
    PyErr_Restore(dest.error_type, dest.error_value, dest.error_tb);
    return nullptr;
  }
  if (!status.ok()) return RaiseCallError(status);
  Py_RETURN_NONE;
}

PyMethodDef kReaderMethods[] = {
    {"read", ReaderRead, METH_VARARGS,
     "read(request: bytes, alloc) -> None: the slice into alloc(header)'s "
     "buffer"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject* g_reader_type = nullptr;  // made from kReaderSpec

PyType_Slot kReaderSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(ReaderDealloc)},
    {Py_tp_methods, kReaderMethods},
    {Py_tp_doc, const_cast<char*>("A C++ tensormorph::Client for reads.")},
    {0, nullptr}};
// Readers come from connect() only: Reader() would hold no Client.
PyType_Spec kReaderSpec = {
    "tensormorph._native.Reader", sizeof(ReaderObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, kReaderSlots};

PyObject* Connect(PyObject* /*module*/, PyObject* args) {
  const char* target;
  const char *ca, *cert, *key;
  Py_ssize_t ca_size, cert_size, key_size;
  ClientOptions options;
  const char* token;
  double timeout;
  if (!PyArg_ParseTuple(args, "ssy#y#y#d:connect", &target, &token, &ca,
                        &ca_size, &cert, &cert_size, &key, &key_size,
                        &timeout)) {
    return nullptr;
  }
  options.token = token;
  options.tls_root_ca.assign(ca, ca_size);
  options.tls_client_cert.assign(cert, cert_size);
  options.tls_client_key.assign(key, key_size);
  // Python's deadline, always set: inf for a stream without one.
  options.timeout = timeout == Py_HUGE_VAL ? absl::InfiniteDuration()
                                           : absl::Seconds(timeout);
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(target, options);
  if (!client.ok()) return RaiseCallError(client.status());
  auto* r = PyObject_New(ReaderObject, g_reader_type);
  if (r == nullptr) return nullptr;
  new (&r->client) std::unique_ptr<Client>(std::move(*client));
  r->owner = getpid();
  return reinterpret_cast<PyObject*>(r);
}

PyMethodDef kModuleMethods[] = {
    {"connect", Connect, METH_VARARGS,
     "connect(target, token, tls_ca, tls_cert, tls_key, timeout) -> Reader"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef g_module = {PyModuleDef_HEAD_INIT,
                        "_native",
                        "The Python client's compiled read (ReadSlice into a "
                        "buffer).",
                        -1,
                        kModuleMethods,
                        nullptr,
                        nullptr,
                        nullptr,
                        nullptr};

}  // namespace
}  // namespace tensormorph

PyMODINIT_FUNC PyInit__native() {
  PyObject* m = PyModule_Create(&tensormorph::g_module);
  if (m == nullptr) return nullptr;
  tensormorph::g_reader_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromSpec(&tensormorph::kReaderSpec));
  tensormorph::g_call_error =
      PyErr_NewException("tensormorph._native.CallError", nullptr, nullptr);
  // ErrorInfo.domain of the server's reasons, for CallError's details.
  const std::string domain(tensormorph::kErrorDomain);
  if (tensormorph::g_reader_type == nullptr ||
      tensormorph::g_call_error == nullptr ||
      PyModule_AddObjectRef(m, "CallError", tensormorph::g_call_error) < 0 ||
      PyModule_AddStringConstant(m, "ERROR_DOMAIN", domain.c_str()) < 0 ||
      PyModule_AddObjectRef(
          m, "Reader",
          reinterpret_cast<PyObject*>(tensormorph::g_reader_type)) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
