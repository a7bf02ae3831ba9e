/* version.c - the library's version, as meson's project() gives it.
 * Pure; any thread. */
#include "leaserun.h"

const char *lr_version(void)
{
	return LR_VERSION;
}
