# The web UI: every file under ui/ but this one, package.json, tests and node_modules is
# compiled into the binary (build/include/ui_assets.c, served by
# src/server). Included by the top Makefile.
UI_FILES := $(shell find ui -type f ! -name ui.mk ! -name package.json ! -path 'ui/node_modules/*' \
	      ! -path 'ui/test/*' 2>/dev/null | sort)
UI_C     := $(B)/include/ui_assets.c
UI_O     := $(B)/obj/gen/ui_assets.o

$(UI_C): scripts/embed_ui.py $(UI_FILES) ui/ui.mk
	@mkdir -p $(@D)
	python3 scripts/embed_ui.py $@ ui $(UI_FILES)

$(UI_O): $(UI_C)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# The library holds the assets (so `sonde` and the tests that link it do).
$(LIB): $(UI_O)
