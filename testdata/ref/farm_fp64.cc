// A C entry point to FarmHash's Fingerprint64 (util::Fingerprint64 in
// Debian's libfarmhash, which is C++ only), for maglev_ref.c built with
// -DWITH_FARM.
#include <farmhash.h>
#include <stddef.h>
#include <stdint.h>

extern "C" uint64_t farm_fingerprint64(const char *s, size_t len)
{
	return util::Fingerprint64(s, len);
}
