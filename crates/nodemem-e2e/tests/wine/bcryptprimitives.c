/* Windows 10's ProcessPrng (bcryptprimitives.dll), which Rust's standard library calls
   for random bytes since Rust 1.78. Wine 8 (Debian 12's) has no bcryptprimitives.dll,
   so the Windows plugin could not start under it; on Windows the system's DLL answers.
   The test builds this with mingw-w64 and puts it on Wine's search path; it forwards
   to advapi32's RtlGenRandom (SystemFunction036), which Wine has. */
#include <windows.h>
#include <ntsecapi.h>

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
  while (len > 0) {
    ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
    if (!RtlGenRandom(data, chunk)) return FALSE;
    data += chunk;
    len -= chunk;
  }
  return TRUE;
}
