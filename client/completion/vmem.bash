# bash completion for vmem(1), the command-line client of vmemd.
#
# Self-contained: uses only bash built-ins (no bash-completion helpers), so
# it also works when sourced by hand. Commands and options mirror
# `vmem help`; tests/integration/test_manuals.py checks that they stay in
# step.

# Options that take a value (the next word, or after "=").
_vmem_valued='--repo --socket --agent --timeout --if-version --context
	--x --y --z --limit --after -m --message --action --outcome --tag
	--importance --min-importance --metadata --since --until --meta
	--embedding-file --top --user'

_vmem_takes_value()
{
	local o
	for o in $_vmem_valued; do
		[[ $1 == "$o" ]] && return 0
	done
	return 1
}

_vmem()
{
	local cur prev cmd sub i w nargs=0
	local commands='store get exists rm ls before search watch log reload
		history rollback-point sync status conflicts resolve init
		merge-driver daemon service exp chat doc mcp help'
	local globals='--repo --socket --json --no-autostart --agent --timeout
		--help --version'
	local opts=''

	COMPREPLY=()
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=''
	((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
	# "--repo=PA": bash splits it into "--repo", "=", "PA".
	if [[ $cur == = ]]; then
		prev=${COMP_WORDS[COMP_CWORD - 1]}
		cur=''
	elif [[ $prev == = ]] && ((COMP_CWORD > 1)); then
		prev=${COMP_WORDS[COMP_CWORD - 2]}
	fi

	case $prev in
	--repo)
		compopt -o filenames 2>/dev/null
		COMPREPLY=($(compgen -d -- "$cur"))
		return 0
		;;
	--socket | --embedding-file)
		compopt -o filenames 2>/dev/null
		COMPREPLY=($(compgen -f -- "$cur"))
		return 0
		;;
	esac
	if _vmem_takes_value "$prev"; then
		return 0
	fi

	# The command is the first word that is neither an option nor the
	# value of one; the words after it are its arguments.
	cmd=''
	sub=''
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if _vmem_takes_value "$w"; then
			((i++))
			[[ ${COMP_WORDS[i]} == = ]] && ((i++))
			continue
		fi
		case $w in
		-*) continue ;;
		esac
		if [[ -z $cmd ]]; then
			cmd=$w
		else
			((nargs == 0)) && sub=$w
			((nargs++))
		fi
	done

	if [[ -z $cmd ]]; then
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "$globals" -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		fi
		return 0
	fi

	case $cmd in
	store) opts='--overwrite --if-version --context' ;;
	rm) opts='--if-version' ;;
	ls) opts='--x --y --z --limit --after' ;;
	before) opts='--z' ;;
	search) opts='--all --limit' ;;
	watch) opts='--x --y --z' ;;
	history | log | conflicts) opts='--limit' ;;
	resolve) opts='--ours --theirs --keep-acknowledged' ;;
	sync) opts='-m --message' ;;
	mcp) opts='--agent' ;;
	chat)
		if ((nargs == 0)) && [[ $cur != -* ]]; then
			COMPREPLY=($(compgen -W 'ls show' -- "$cur"))
			return 0
		fi
		opts='--user --limit'
		;;
	doc)
		if ((nargs == 0)) && [[ $cur != -* ]]; then
			COMPREPLY=($(compgen -W 'add search between' -- "$cur"))
			return 0
		fi
		if [[ $sub == add ]] && ((nargs == 1)) && [[ $cur != -* ]]; then
			compopt -o filenames 2>/dev/null
			COMPREPLY=($(compgen -f -- "$cur"))
			return 0
		fi
		opts='--meta --embedding-file --top --limit'
		;;
	daemon)
		if ((nargs == 0)) && [[ $cur != -* ]]; then
			COMPREPLY=($(compgen -W 'start stop run' -- "$cur"))
			return 0
		fi
		;;
	service)
		if ((nargs == 0)) && [[ $cur != -* ]]; then
			COMPREPLY=($(compgen -W 'install uninstall status' \
				-- "$cur"))
			return 0
		fi
		;;
	exp)
		if ((nargs == 0)) && [[ $cur != -* ]]; then
			COMPREPLY=($(compgen -W 'add ls similar stats get rm' \
				-- "$cur"))
			return 0
		fi
		case $sub in
		add) opts='--context --action --outcome --tag --importance
			--metadata' ;;
		ls) opts='--tag --since --until --min-importance --limit' ;;
		similar) opts='--min-importance --limit' ;;
		'') opts='--context --action --outcome --tag --importance
			--metadata --since --until --min-importance --limit' ;;
		esac
		;;
	help)
		if ((nargs == 0)) && [[ $cur != -* ]]; then
			COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		fi
		return 0
		;;
	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$opts $globals" -- "$cur"))
	fi
	return 0
}

complete -F _vmem vmem
