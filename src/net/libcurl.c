/* libcurl.c: libcurl's one global initialisation (libcurl.h). */
#include "net/libcurl.h"

#include <curl/curl.h>
#include <pthread.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

void net_init_curl(void)
{
	pthread_once(&once, init_once);
}
