/* replay.c - a main() for a fuzz target built without libFuzzer: feeds it
 * every file named on the command line, and every file in every directory
 * named (in name order), once. So any compiler runs the seed corpus and the
 * regression inputs as an ordinary test; a crash or a failed check aborts. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/readall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0;
	if (f == NULL || lr_read_all(f, SIZE_MAX - 1, &buf, &len) != 0) {
		perror(path);
		if (f != NULL)
			fclose(f);
		return -1;
	}
	fclose(f);
	fprintf(stderr, "replay %s (%zu bytes)\n", path, len);
	LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
	free(buf);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int replay_dir(const char *dir, int *count)
{
	struct dirent **names = NULL;
	int n = scandir(dir, &names, NULL, by_name);
	if (n < 0) {
		perror(dir);
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		if (names[i]->d_name[0] != '.' && stat(path, &st) == 0 &&
		    S_ISREG(st.st_mode)) {
			if (replay_file(path) != 0)
				rc = -1;
			else
				(*count)++;
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	int count = 0, rc = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			rc = 1;
		} else if (S_ISDIR(st.st_mode)) {
			if (replay_dir(argv[i], &count) != 0)
				rc = 1;
		} else if (replay_file(argv[i]) != 0) {
			rc = 1;
		} else {
			count++;
		}
	}
	if (count == 0) {
		fprintf(stderr, "no input replayed\n");
		rc = 1;
	}
	printf("%d inputs replayed\n", count);
	return rc;
}
